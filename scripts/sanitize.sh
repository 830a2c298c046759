#!/usr/bin/env bash
# The sanitizer legs of `make test` (issue 28 §2; docs/reliability.md):
#   scripts/sanitize.sh address  ASan + UBSan build in build-asan: kvgate_unit_tests and
#                                kv_jinja_tests, then the
#                                integration tests that drive the data plane, the event plane and
#                                governance (INTEGRATION below) against that kvgate binary
#   scripts/sanitize.sh thread   TSan build in build-tsan: kvgate_tsan_tests, the unit tests of
#                                the parts that share state between threads (CMakeLists.txt names
#                                them: event plane, KV index and tables, hint index, quota ledger
#                                and its Redis store, logging, endpoint leases and health, P/D
#                                sessions and controller, the delay relay)
# Each process writes its sanitizer reports to a log directory (log_path): a report from any
# kvgate the integration tests start (gateway, sim, index) fails the leg, even when the test that
# started it passed. Builds use clang, ccache, the project's -O2 -g1 and -j2.
set -euo pipefail
cd "$(dirname "$0")/.."
leg=${1:?usage: scripts/sanitize.sh address|thread}
bash scripts/setup.sh --sanitize  # clang, its sanitizer runtimes, llvm-symbolizer
JOBS=${JOBS:-2}

# The integration tests of the ASan leg: data plane (proxy, P/D, TLS, HTTP/2: its streams' lifetimes
# across resets and closes, reading requests, the path regressions, the gateway's own /tokenize
# and /detokenize answers), event plane (KV events, hints) and governance (keys, JWT, quotas, replicas).
# Not `limits`: at the open-files limit UBSan's vptr check cannot make the pipe it probes memory
# with (IsAccessibleMemoryRange) and reports "invalid vptr" on sound objects. Not `overload`:
# under ASan, glibc's mallinfo2 does not see ASan's heap.
INTEGRATION=${INTEGRATION:-"proxy pd http2 http2_backend tokenize_api reading regressions_path regressions_review faults kv_events hints api_keys jwt quotas replicas tls tracing sockmap"}
case "$leg" in
  address) dir=build-asan ;;
  thread) dir=build-tsan ;;
  *) echo "scripts/sanitize.sh: address or thread, not '$leg'" >&2; exit 2 ;;
esac
# clang: it builds these in about 2/3 of g++'s time (ASan + UBSan), and its runtimes are the
# reference ones. The build type's flags are the project's (-O2 -g1).
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DKVGATE_SANITIZE="$leg" >/dev/null
if [ "$leg" = address ]; then
  cmake --build "$dir" -j"$JOBS" --target kvgate kvgate_unit_tests kv_jinja_tests
else
  cmake --build "$dir" -j"$JOBS" --target kvgate_tsan_tests
fi

logs=$(mktemp -d /tmp/kvgate-sanitize-XXXXXX)
trap 'rm -rf "$logs"' EXIT
export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0:handle_abort=1"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="log_path=$logs/tsan:halt_on_error=0:second_deadlock_stack=1:print_suppressions=0:suppressions=$PWD/tests/sanitize/tsan.supp"
# Sanitizer runtimes of clang 14 cannot map their shadow memory under more than 28 bits of mmap
# randomization (newer kernels' default): without address randomization then.
run=()
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ]; then
  run=(setarch "$(uname -m)" -R)
  "${run[@]}" true || {
    echo "scripts/sanitize.sh: vm.mmap_rnd_bits is over 28 and setarch -R is not allowed here" \
      "(a container's seccomp profile?): clang 14's sanitizers cannot run" >&2
    exit 1
  }
fi
status=0
# (each run bounded: a hang fails the leg instead of stalling CI)
if [ "$leg" = address ]; then
  timeout -k 30 900 "${run[@]}" "$dir/kvgate_unit_tests" --gtest_brief=1 || status=1
  timeout -k 30 300 "${run[@]}" "$dir/kv_jinja_tests" --gtest_brief=1 || status=1
  for t in $INTEGRATION; do
    echo "== integration.$t (ASan + UBSan)"
    KVGATE_BIN="$PWD/$dir/kvgate" timeout -k 30 600 "${run[@]}" node --test --test-concurrency=1 \
      "tests/integration/$t.test.mjs" >"$logs/node.out" 2>&1 || { status=1; cat "$logs/node.out"; }
    { grep -E '^# (pass|fail)' "$logs/node.out" || true; } | tr '\n' ' '; echo
  done
  rm -f "$logs/node.out"
else
  timeout -k 30 900 "${run[@]}" "$dir/kvgate_tsan_tests" --gtest_brief=1 || status=1
fi
reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
  echo "scripts/sanitize.sh $leg: sanitizer reports:" >&2
  for f in $reports; do echo "---- $f" >&2; head -c 20000 "$f" >&2; done
  status=1
fi
[ "$status" = 0 ] && echo "scripts/sanitize.sh $leg: passed"
exit "$status"
