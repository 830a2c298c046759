#!/usr/bin/env bash
# The fleet benchmark's whole report in one command: every workload and check that
# docs/benchmarks.md shows, each a `kvgate bench fleet` run writing JSON, a Markdown table and a
# chart into OUT (default build/bench), and fleet-<run>-pivot.md (scripts/fleet_pivot.py: TTFT
# p90, hit rate and throughput, an arm a row). Runs one after another (2 cores: never two at once).
#
#   bench/fleet_suite.sh [--full] [OUT]      (OUT relative to the current directory)
#   ONLY="gsp speedup" bench/fleet_suite.sh   runs only the runs named (names below)
#
#   Every run has the default law (kv-predict-q), round-robin, the seed's hard law, the peers'
#   current defaults (lmetric, llm-d-sticky, dynamo-v1, smg) and the oracle at every rung (since
#   2026-12-07; before, lc and kv-taper-lc were on every rung and the peers at side rungs), older
#   laws and peers (lc, kv-ttft, kv-taper-lc, sglang-cli, dynamo, llm-d) at side rungs.
#   gsp          SGLang's generated-shared-prefix, quick mode (the arms above over the ladder
#                10-80/s, every other arm at 20 and 80/s); --full: every arm over the whole ladder
#   nosharing    the control: nothing is shared, round-robin is the natural best
#   llmd         llm-d's precise-routing shape (150 groups need --warmup 750 to be warm)
#   multiround   multi-round chat
#   mooncake     a generated Mooncake-format trace replayed at its own arrival pattern
#   agentic      agent sessions over tool preambles growing to ~60k tokens, Zipf RAG documents,
#                cold prompts; agentic-1tool: the same over one shared tool preamble
#   speedup      gsp's key arms at --speedup 0.25 with the ladder halved (the same load relative
#                to the engines): the result must not depend on the time compression
#   prefill-half, prefill-double
#                gsp's key arms with the simulated prefill cost halved and doubled
#
# Needs build/kvgate (make) and, for the charts, python3-matplotlib (scripts/setup.sh --bench).
# Runtime on 2 cores: 54 minutes (quick), 64 (full), measured 2026-12-01 with fewer arms (three
# to five at every rung, no agentic runs); the current set runs more arms on every workload and
# has not been timed whole (its gsp run: 876 s, 2026-12-07); each run prints its own duration.
set -euo pipefail
FULL=0
OUT_ARG=""
for a in "$@"; do
  case "$a" in
    --full) FULL=1 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    -*) echo "unknown option $a (--full, --help)" >&2; exit 2 ;;
    *) [ -z "$OUT_ARG" ] || { echo "one OUT directory only" >&2; exit 2; }; OUT_ARG=$a ;;
  esac
done
set -- ${OUT_ARG:+"$OUT_ARG"}
BIN=$(realpath -m "${KVGATE_BIN:-$(dirname "$0")/../build/kvgate}")  # before the cd below
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "${1:-$REPO/build/bench}" && cd "${1:-$REPO/build/bench}" && pwd)
cd "$REPO"
NAMES="gsp nosharing llmd multiround mooncake agentic agentic-1tool speedup prefill-half prefill-double"
ONLY=${ONLY:-}  # a space-separated subset of NAMES
for n in $ONLY; do
  [[ " $NAMES " == *" $n "* ]] || { echo "unknown run '$n' in ONLY (runs: $NAMES)" >&2; exit 2; }
done
run() {  # NAME ARGS...: one run, its outputs named after it
  local name=$1; shift
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
  echo "== $name: $BIN bench fleet $* (started $(date -u +%H:%M:%SZ))"
  local t0=$SECONDS
  "$BIN" bench fleet "$@" --out "$OUT/fleet-$name.json" --md "$OUT/fleet-$name.md" \
    --chart "$OUT/fleet-$name.png"
  /usr/bin/python3 scripts/fleet_pivot.py "$OUT/fleet-$name.json" "$OUT/fleet-$name-pivot.md"
  echo "== $name: $((SECONDS - t0)) s"
}
GSP=(--workload gsp --wl output_len=64 --workers 4 --requests 200)
# The default law, round-robin, the seed's law and the peers' current defaults: every rung.
MAIN="rr,kv-hard,kv-predict-q,lmetric,llm-d-sticky,dynamo-v1,smg"
OLDER="lc,kv-ttft,kv-taper-lc,sglang-cli,dynamo,llm-d"
KEY="rr,kv-hard,kv-predict-q,oracle"
if [ $FULL = 1 ]; then
  run gsp "${GSP[@]}" --qps 10,20,40,60,80 --speedup 0.5 \
    --arms $MAIN,oracle,lc,random,chwbl,kv-off,kv-soft,kv-adaptive,kv-adaptive-soft,kv-taper,kv-ttft,kv-predict,kv-soft-lc,kv-taper-lc,sglang,sglang-cli,dynamo,llm-d
else
  run gsp "${GSP[@]}" --quick --qps 10,20,40,60,80 --speedup 0.5
fi
run nosharing --workload nosharing --wl output_len=64 --workers 4 --arms $MAIN,lc \
  --qps 10,20,40,60 --requests 150 --speedup 0.5
run llmd --workload llmd --wl output_len=64 --workers 4 --arms $MAIN,oracle \
  --side-arms $OLDER --qps 6,9,12 --side-qps 12 --requests 100 --warmup 750 --speedup 0.5
run multiround --workload multiround --workers 4 --arms $MAIN,oracle \
  --side-arms $OLDER --qps 5,10,20,30 --side-qps 10,30 --requests 200 --speedup 0.5
run mooncake --workload mooncake --workers 4 --arms $MAIN,oracle \
  --side-arms $OLDER --qps 8,16,24 --side-qps 24 --requests 100 --speedup 0.5
run agentic --workload agentic --workers 4 --arms $MAIN,oracle \
  --side-arms $OLDER --qps 4,8,12 --side-qps 12 --requests 200
run agentic-1tool --workload agentic --wl tools=1 --workers 4 --arms $MAIN,oracle \
  --side-arms $OLDER --qps 4,8,12 --side-qps 12 --requests 200
run speedup "${GSP[@]}" --arms "$KEY" --side-arms sglang-cli,dynamo --qps 5,10,20,30,40 \
  --side-qps 10,40 --speedup 0.25
run prefill-half "${GSP[@]}" --arms "$KEY" --side-arms sglang-cli,dynamo --qps 20,80 \
  --speedup 0.5 --sim-arg=--prefill-factor=0.5
run prefill-double "${GSP[@]}" --arms "$KEY" --side-arms sglang-cli,dynamo --qps 20,80 \
  --speedup 0.5 --sim-arg=--prefill-factor=2
echo "== all runs written to $OUT"
