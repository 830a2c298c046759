#!/usr/bin/env bash
# `make bench`: every side-by-side benchmark in one run; prints Markdown for docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "## Run of $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
echo
echo "### Proxy overhead: bench/proxy_bench.sh ${PROXY_ROUNDS:-3} ${PROXY_SECONDS:-10} 64"
echo
bash bench/proxy_bench.sh "${PROXY_ROUNDS:-3}" "${PROXY_SECONDS:-10}" 64 2>/dev/null
echo
echo "### TLS termination: bench/tls_bench.sh ${PROXY_ROUNDS:-3} ${PROXY_SECONDS:-10} 64"
echo
KVGATE_BIN=build/kvgate bash bench/tls_bench.sh "${PROXY_ROUNDS:-3}" "${PROXY_SECONDS:-10}" 64 2>/dev/null
echo
echo "### Streaming: bench/sse_bench.sh 1000 200 20 ${SSE_ROUNDS:-2} 1"
echo
bash bench/sse_bench.sh 1000 200 20 "${SSE_ROUNDS:-2}" 1 2>/dev/null
echo
echo "### Tokenizer: node bench/tokenizer_bench.mjs --seconds 3 --rounds 3"
echo
node bench/tokenizer_bench.mjs --kvgate build/kvgate --seconds 3 --rounds 3 2>/dev/null
echo
echo "### P/D: build/pd_ladder_bench --benchmark_repetitions=3; node bench/pd_bench.mjs"
echo
build/pd_ladder_bench --benchmark_repetitions=3 2>/dev/null | grep -E "median" || true
node bench/pd_bench.mjs --kvgate build/kvgate --requests 1000 --rounds 3 2>/dev/null
echo
echo "### LookupRoute: build/hint_lookup_bench; bench/lookup_bench.sh 1000000 8; node bench/hints_gateways.mjs"
echo
build/hint_lookup_bench --benchmark_repetitions=3 2>/dev/null | grep -E "median" || true
echo
KVGATE_BIN=build/kvgate bash bench/lookup_bench.sh 1000000 8 2>/dev/null
echo
KVGATE_BIN=build/kvgate node bench/hints_gateways.mjs 2>/dev/null
