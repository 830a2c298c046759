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
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
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

echo "== starting a simulated fleet: 4 vLLM workers on 127.0.0.10-13"
"$BIN" sim --engine vllm --hosts 127.0.0.10-13 --port 0 --model demo-model \
  --num-blocks 2048 --prefill-us-per-token 150 --itl-ms 5 >"$WORK/sim.out" 2>"$WORK/sim.err" &
pids+=($!)
SIM=$(wait_ready "$WORK/sim.out")
echo "$SIM"

echo "== starting kvgate (management API on 127.0.0.1:11111 if free)"
API_PORT=11111
if (exec 3<>/dev/tcp/127.0.0.1/$API_PORT) 2>/dev/null; then API_PORT=0; fi
"$BIN" serve --api-listen 127.0.0.1:$API_PORT --state-dir "$WORK/state" >"$WORK/gw.out" 2>"$WORK/gw.err" &
pids+=($!)
API=$(wait_ready "$WORK/gw.out" | sed -E 's/.*"api":"([^"]+)".*/\1/')
echo "management API: $API"

VIP_PORT=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
ENDPOINTS=$(echo "$SIM" | /usr/bin/python3 -c '
import json,sys
w=json.load(sys.stdin)["workers"]
print(",".join(json.dumps({"endpointIP":x["host"],"targetPort":x["port"],"weight":1}) for x in w))')

echo "== creating a service through the REST API"
set -x
curl -s -X POST "$API/netlox/v1/config/loadbalancer" -H "Content-Type: application/json" -d "{
  \"serviceArguments\": {\"externalIP\": \"127.0.0.1\", \"port\": $VIP_PORT, \"protocol\": \"tcp\",
    \"sel\": 0, \"mode\": 4, \"sse_mode\": true, \"name\": \"demo\"},
  \"endpoints\": [$ENDPOINTS]}"
{ set +x; } 2>/dev/null
echo
"$BIN" ctl --api "$API" get

echo "== sending a shared-prefix workload with the openai client"
node scripts/demo_workload.mjs "http://127.0.0.1:$VIP_PORT/v1" "$SIM"
