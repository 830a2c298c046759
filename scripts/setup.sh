#!/usr/bin/env bash
# Installs every Debian package and pinned npm package that kvgate's build, tests and demo need.
# Idempotent: packages already present are skipped, so a warm machine pays a few dpkg queries.
# Runs as root (CI) or through sudo when available.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  g++ make cmake ccache pkg-config curl ca-certificates procps iproute2
  libboost-dev            # Asio (header-only) for every event loop
  nlohmann-json3-dev      # control-plane JSON, simulator JSON
  libsimdjson-dev         # hot-path request body parsing
  libexpected-dev         # tl::expected for Result<T>
  libxxhash-dev           # XXH3 (request ids, prefix keys, fingerprints)
  libicu-dev              # Unicode normalization (NFC) for tokenizers
  libonig-dev             # Oniguruma: tokenizer Split regexes without a hand-written matcher
  libgtest-dev libgmock-dev
  libbenchmark-dev        # Google Benchmark: micro-benchmarks under bench/ (built with the rest)
  libzmq3-dev cppzmq-dev  # KV events: ZMQ SUB (gateway) and PUB (simulator)
  libnghttp2-dev          # HTTP/2 framing and HPACK (src/proxy/h2)
  clang libbpf-dev bpftool  # the L4 data path: BPF target, loader, skeleton (src/l4)
  ethtool                 # the L4 tests turn checksum offload off (checksums really checked)
  nghttp2-client python3-h2  # HTTP/2 clients of the tests (nghttp, h2load; a raw frame client)
  chromium                # the dashboard's page test in a headless browser (tests/integration/ui.test.mjs)
  libssl-dev              # SHA-256 for vLLM's sha256_cbor block hashes (simulator, hash contract)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # kvgate index (LookupRoute)
  libsqlite3-dev sqlite3  # governance state (API keys) in --state-dir; sqlite3 CLI for the tests
  libcpp-jwt-dev          # JWT verification (governance/jwt_auth.h says why this one)
  libpq-dev postgresql    # governance state shared by replicas (--state-db); tests run a server
  libhiredis-dev redis-server  # quota counters shared by replicas (--redis); tests run a server
  clang-format clang-tidy # make lint
  prometheus              # promtool checks the /metrics exposition in the tests
  dpkg-dev file systemd   # make deb (cpack: dpkg-shlibdeps, file) and its test (systemd-analyze)
  python3-jinja2          # second chat-template oracle (tests/tokenizer/jinja2_check.py): real Jinja2
  python3-zmq python3-msgpack python3-cbor2  # independent vLLM KV-event publisher (interop test)
)

# clang with its sanitizer runtimes, libFuzzer and llvm-symbolizer: the sanitizer legs of
# `make test` (scripts/sanitize.sh calls scripts/setup.sh --sanitize) and `make fuzz`.
if [ "${1:-}" = "--fuzz" ] || [ "${1:-}" = "--sanitize" ]; then
  APT_PACKAGES+=(clang libclang-rt-14-dev llvm)  # (llvm: the unversioned llvm-symbolizer)
fi

# Benchmark anchors and tools, only for `make bench` (scripts/setup.sh --bench).
if [ "${1:-}" = "--bench" ]; then
  APT_PACKAGES+=(nginx-light haproxy wrk util-linux linux-perf valgrind)
  APT_PACKAGES+=(nftables)  # the L4 benchmark's kernel NAT arms (bench/l4_bench.sh)
  APT_PACKAGES+=(python3-matplotlib)  # the fleet benchmark's charts (scripts/fleet_chart.py)
  APT_PACKAGES+=(manpages-zh)  # Chinese prose for the tokenizer benchmark's CJK corpus
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js (with npm) for the integration tests' real clients; nodesource builds ship npm inside.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

# Pinned npm packages (package-lock.json); reinstall only when the lockfile changed.
if [ ! -f node_modules/.kvgate-lock-stamp ] || ! cmp -s package-lock.json node_modules/.kvgate-lock-stamp; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.kvgate-lock-stamp
fi
echo "setup: ok"
