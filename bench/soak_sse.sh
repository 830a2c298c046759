#!/usr/bin/env bash
# Soak (issue 28 §2; docs/reliability.md): STREAMS concurrent SSE streams through one gateway for
# about MINUTES minutes: each stream is one chat completion of EVENTS events spaced ITL ms by the
# simulator (--timing fixed), so every stream stays open the whole run. Every SAMPLE_S seconds
# the gateway's RSS and open descriptors are written to OUT/samples.tsv; at the end the bench's
# JSON line (streams completed, errors, relay delay) and a summary: RSS idle, with every stream
# open early and late in the run, after the streams ended; descriptors the same.
# Usage: bench/soak_sse.sh [STREAMS=10000] [MINUTES=10] [OUT=build/soak]
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMS=${1:-10000}; MINUTES=${2:-10}; OUT=${3:-build/soak}
ITL=${ITL:-1000}; SAMPLE_S=${SAMPLE_S:-15}
EVENTS=$(( MINUTES * 60000 / ITL ))
BIN=${KVGATE_BIN:-build/kvgate}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/kvgate-soak.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
# 10,000 streams are 20,000 descriptors in the gateway (client + upstream): raise the limit when
# allowed (root), else use the hard limit as it is.
ulimit -Hn 262144 2>/dev/null || true
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "descriptor limit: $(ulimit -n)"
"$BIN" sim --workers 1 --port 0 --timing fixed --stamp-events --itl-ms "$ITL" --prefill-base-ms 0 \
  --prefill-us-per-token 0 --max-concurrency 100000 >"$W/sim.out" 2>"$W/sim.err" & pids+=($!)
"$BIN" serve --api-listen 127.0.0.1:0 --state-dir "$W/kv" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
KVPID=$!
for _ in $(seq 1 100); do grep -q ready "$W/kv.out" 2>/dev/null && grep -q ready "$W/sim.out" 2>/dev/null && break; sleep 0.1; done
SIMPORT=$(sed -E 's/.*"port":([0-9]+).*/\1/' "$W/sim.out" | head -1)
API=$(sed -E 's/.*"api":"([^"]+)".*/\1/' "$W/kv.out")
VIP=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$VIP,\"protocol\":\"tcp\",\"mode\":4,\"sse_mode\":true},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$SIMPORT,\"weight\":1}]}" >/dev/null
sample() {  # seconds-since-start  rss-KiB  fds
  echo -e "$1\t$(awk '/VmRSS/{print $2}' /proc/$KVPID/status)\t$(ls /proc/$KVPID/fd | wc -l)"
}
echo -e "t_s\trss_kib\tfds" >"$OUT/samples.tsv"
sample 0 >>"$OUT/samples.tsv"
start=$(date +%s)
"$BIN" bench sse --target "127.0.0.1:$VIP" --streams "$STREAMS" --events "$EVENTS" --ramp-ms 20000 \
  >"$OUT/bench.json" 2>"$OUT/bench.err" &
BENCH=$!
while kill -0 "$BENCH" 2>/dev/null; do
  sleep "$SAMPLE_S"
  kill -0 "$KVPID" 2>/dev/null || { echo "the gateway exited" >&2; exit 1; }
  sample $(( $(date +%s) - start )) >>"$OUT/samples.tsv"
done
wait "$BENCH" || true
sleep 5
sample "after" >>"$OUT/samples.tsv"
cat "$OUT/bench.json"
column -t "$OUT/samples.tsv" | sed -n '1,3p;$p'
echo "samples: $OUT/samples.tsv ($(( $(wc -l <"$OUT/samples.tsv") - 1 )) rows)"
