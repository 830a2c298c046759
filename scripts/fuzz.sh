#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs each for
# $1 seconds (default 60) on a scratch copy of its corpus; inputs that add coverage are merged
# back into tests/fuzz/corpus/<target>/ (review and commit them: `make test` replays them).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-60}"
cmake -S . -B build-fuzz -DKVGATE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang >/dev/null
for t in ${FUZZ_TARGETS:-request_head chunked facts kv_events engine_metrics trtllm_events pd_dialect hint_rpc jwt target form_model rule_json jinja}; do
  cmake --build build-fuzz -j2 --target "fuzz_$t"
  work="$(mktemp -d)"
  cp tests/fuzz/corpus/$t/* "$work/"
  echo "fuzz: $t for ${SECONDS_EACH}s"
  ./build-fuzz/fuzz_$t -max_total_time="$SECONDS_EACH" -max_len=65536 -rss_limit_mb=4096 -timeout=10 \
    -print_final_stats=1 "$work" 2>&1 | tail -n 12
  # Keep only inputs that add coverage, small enough to commit.
  ./build-fuzz/fuzz_$t -merge=1 -max_len=16384 tests/fuzz/corpus/$t "$work" 2>&1 | tail -n 1
  rm -rf "$work"
done
