#!/usr/bin/env bash
# The engines' /tokenize and /detokenize answered by the gateway (issue 31, docs/apis.md
# "Tokenize and detokenize"), side by side in one run: the same load through one kvgate with a
# rule that answers them itself (kvTokenizeLocal verified, the default: every 100th call still
# checked by the engine) and a rule that forwards them (kvTokenizeLocal off), in front of the same
# simulated vLLM worker serving Qwen3-8B's real tokenizer (kvgate sim --models-dir), arms
# alternated ROUNDS times. The simulator is C++, so the engine CPU it saves understates a Python
# API server's. The simulator shares CPU 1 with h2load: a forwarded arm's calls/s is bounded by
# that core, so the calls/s ratio reflects this layout; the CPU per call of each side does not.
#
# Layout (2 cores): kvgate (one worker) on CPU 0; the simulator and h2load on CPU 1. Usage:
#   bench/tokenize_api_bench.sh [ROUNDS=3] [REQUESTS=50000] [CONNECTIONS=16]
# Prints per arm and round: requests/s, mean and max request time, the gateway's CPU per call,
# and the engine's (the simulator's) CPU per call.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${1:-3}; N=${2:-50000}; CONNS=${3:-16}
BIN=${KVGATE_BIN:-build/kvgate}
MODEL=Qwen/Qwen3-8B
for t in h2load taskset; do command -v $t >/dev/null || { echo "missing $t: run scripts/setup.sh --bench" >&2; exit 1; }; done
W=$(mktemp -d /tmp/kvgate-tokbench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
MODELS=${MODELS_DIR:-build/models}
[ -f "$MODELS/$MODEL/tokenizer.json" ] || node scripts/models_dir.mjs "$MODELS" >/dev/null
LOCAL=$(freeport); FWD=$(freeport)
# A ~1 KB English prompt (about 200 tokens), and the ids of another for /detokenize.
PROMPT='The gateway answers the tokenize call itself once the engine agreed with it on the same form. '
PROMPT="$PROMPT$PROMPT$PROMPT$PROMPT$PROMPT$PROMPT$PROMPT$PROMPT$PROMPT$PROMPT"
printf '{"model":"%s","prompt":"%s"}' "$MODEL" "$PROMPT" >"$W/tok.json"
taskset -c 1 "$BIN" sim --engine vllm --port 0 --host 127.0.0.1 --models-dir "$MODELS" --model "$MODEL" >"$W/sim.out" 2>"$W/sim.err" & pids+=($!)
for _ in $(seq 1 100); do grep -q ready "$W/sim.out" 2>/dev/null && break; sleep 0.1; done
SIMPORT=$(sed -E 's/.*"port":([0-9]+).*/\1/' "$W/sim.out" | head -1)
curl -sf -X POST -H 'content-type: application/json' "http://127.0.0.1:$SIMPORT/tokenize" -d @"$W/tok.json" \
  | /usr/bin/python3 -c 'import json,sys; t=json.load(sys.stdin)["tokens"]; print(json.dumps({"model":"'"$MODEL"'","tokens":t}))' >"$W/detok.json"
taskset -c 0 "$BIN" serve --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" --models-dir "$MODELS" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
API=$(kvgate_api "$W/kv.out")
for spec in "$LOCAL:verified" "$FWD:off"; do
  IFS=: read -r port mode <<<"$spec"
  curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$port,\"protocol\":\"tcp\",\"mode\":4,\"sel\":0,\"kvTokenizeLocal\":\"$mode\"},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$SIMPORT,\"weight\":1}]}" >/dev/null
done
# Learn both forms on the local rule (the tokenizer loads, then one engine answer matches).
for _ in $(seq 1 100); do
  curl -sf -o /dev/null -X POST -H 'content-type: application/json' "http://127.0.0.1:$LOCAL/tokenize" -d @"$W/tok.json"
  curl -sf -o /dev/null -X POST -H 'content-type: application/json' "http://127.0.0.1:$LOCAL/detokenize" -d @"$W/detok.json"
  # (each API answered by the gateway at least twice)
  n=$(curl -sf "$API/metrics" | awk '/^kvgate_tokenize_api_total/ && /event="answered"/ {v[$0 ~ /api="detokenize"/] += $2}
      END {print ((v[0] >= 2 && v[1] >= 2) ? 1 : 0)}')
  [ "$n" = 1 ] && break
  sleep 0.1
done
[ "$n" = 1 ] || { echo "the gateway never answered both APIs locally" >&2; cat "$W/kv.err" >&2; exit 1; }
HZ=$(getconf CLK_TCK)
echo "arm,round,rps,mean_ms,max_ms,gateway_cpu_us_per_req,failed,engine_cpu_us_per_req,engine_calls" >"$W/results.csv"
engine_calls() { curl -sf "http://127.0.0.1:$SIMPORT/metrics" | awk '/^kvgate_sim_tokenize_requests_total/ {print $2}'; }
run_arm() {  # arm round port path body
  local arm=$1 r=$2 g0 g1 e0 e1 c0 c1
  g0=$(proc_ticks "kvgate serve --workers 1"); e0=$(proc_ticks "kvgate sim --engine vllm"); c0=$(engine_calls)
  taskset -c 1 h2load --h1 -c "$CONNS" -m 1 -n "$N" -d "$W/$5" -H 'content-type: application/json' \
    "http://127.0.0.1:$3$4" >"$W/h2load.txt"
  g1=$(proc_ticks "kvgate serve --workers 1"); e1=$(proc_ticks "kvgate sim --engine vllm"); c1=$(engine_calls)
  /usr/bin/python3 bench/h2load_row.py "$W/h2load.txt" "$arm" "$r" "$((g1 - g0))" "$HZ" \
    "$(awk -v t=$((e1 - e0)) -v hz="$HZ" -v n="$N" 'BEGIN {printf "%.2f", t * 1e6 / hz / n}')" "$(( ${c1%.*} - ${c0%.*} ))" >>"$W/results.csv"
}
echo "h2load --h1: $ROUNDS rounds, $N calls over $CONNS client connections per arm" >&2
for r in $(seq 1 "$ROUNDS"); do
  run_arm tokenize-local "$r" "$LOCAL" /tokenize tok.json
  run_arm tokenize-forwarded "$r" "$FWD" /tokenize tok.json
  run_arm detokenize-local "$r" "$LOCAL" /detokenize detok.json
  run_arm detokenize-forwarded "$r" "$FWD" /detokenize detok.json
done
column -s, -t "$W/results.csv"
cp "$W/results.csv" "${BENCH_OUT:-/tmp/tokenize_api_bench_results.csv}"
