#!/usr/bin/env bash
# HTTP/2 client side (h2c by prior knowledge), side by side in one run: kvgate and nginx
# (`listen ... http2`, proxy_pass over HTTP/1.1 keep-alive) in front of the same upstream, driven
# by h2load (nghttp2-client), arms alternated ROUNDS times. The HTTP/1.1 arms of the same proxies
# under the same h2load (--h1, as many connections as the HTTP/2 arms have streams) run beside
# them, so the HTTP/2 cost reads against each proxy's own HTTP/1.1.
#
# Layout (2 cores): the proxy under test on CPU 0 with one worker; the upstream (nginx answering
# a fixed ~300-byte JSON) and h2load on CPU 1. Usage:
#   bench/h2_bench.sh [ROUNDS=3] [REQUESTS=100000] [CONNECTIONS=16] [STREAMS=8]
# Prints per arm and round: requests/s, mean and max request time, proxy CPU per request.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${1:-3}; N=${2:-100000}; CONNS=${3:-16}; STREAMS=${4:-8}
BIN=${KVGATE_BIN:-build/kvgate}
for t in nginx h2load taskset; do command -v $t >/dev/null || { echo "missing $t: run scripts/setup.sh --bench" >&2; exit 1; }; done
W=$(mktemp -d /tmp/kvgate-h2bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
UP=$(freeport); NG=$(freeport); NG1=$(freeport); KV=$(freeport)
BODY='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"2, 3 and 5."},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":24,"completion_tokens":7,"total_tokens":31}}'
nginx_upstream_conf "$W/up" "$UP" "$BODY"
mkdir -p "$W/ng"
cat >"$W/ng/nginx.conf" <<NGX
worker_processes 1; pid $W/ng/nginx.pid; error_log $W/ng/error.log warn; daemon off;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  http2_max_concurrent_streams 128;
  upstream up { server 127.0.0.1:$UP; keepalive 256; keepalive_requests 10000000; }
  server { listen 127.0.0.1:$NG http2 backlog=4096; listen 127.0.0.1:$NG1 backlog=4096;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NGX
printf '%s' '{"model":"bench-model","messages":[{"role":"user","content":"Name three primes."}],"max_tokens":8}' >"$W/body.json"

taskset -c 1 nginx -p "$W/up" -c "$W/up/nginx.conf" & pids+=($!)
taskset -c 0 nginx -p "$W/ng" -c "$W/ng/nginx.conf" & pids+=($!)
taskset -c 0 "$BIN" serve --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
API=$(kvgate_api "$W/kv.out")
curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$KV,\"protocol\":\"tcp\",\"mode\":4,\"sel\":0},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$UP,\"weight\":1}]}" >/dev/null
sleep 0.5
for p in $NG $KV; do
  h2load -n 10 -c 1 -d "$W/body.json" -H 'content-type: application/json' "http://127.0.0.1:$p/v1/chat/completions" | grep -q "10 succeeded" \
    || { echo "port $p does not serve h2c (nginx $NG, kvgate $KV)" >&2; cat "$W/kv.err" "$W"/ng/error.log >&2; exit 1; }
done

declare -A PAT=([kvgate]="kvgate serve --workers 1" [nginx]="nginx -p $W/ng")
declare -A PORT=([kvgate]=$KV [nginx]=$NG)
declare -A PORT1=([kvgate]=$KV [nginx]=$NG1)  # (nginx 1.22: an h2c port speaks HTTP/2 only)
HZ=$(getconf CLK_TCK)
echo "arm,round,rps,mean_ms,max_ms,cpu_us_per_req,failed" >"$W/results.csv"
run_arm() {  # arm proto round
  local arm=$1 proto=$2 r=$3 before after extra=(-c "$CONNS" -m "$STREAMS") port=${PORT[$1]}
  # HTTP/1.1: the same concurrency as connections, one request at a time on each
  [ "$proto" = h1 ] && extra=(--h1 -c "$((CONNS * STREAMS))" -m 1) && port=${PORT1[$1]}
  before=$(proc_ticks "${PAT[$arm]}")
  taskset -c 1 h2load "${extra[@]}" -n "$N" -d "$W/body.json" \
    -H 'content-type: application/json' "http://127.0.0.1:$port/v1/chat/completions" >"$W/h2load.txt"
  after=$(proc_ticks "${PAT[$arm]}")
  /usr/bin/python3 bench/h2load_row.py "$W/h2load.txt" "$arm-$proto" "$r" "$((after - before))" "$HZ" >>"$W/results.csv"
}
echo "h2load: $ROUNDS rounds, $N requests; h2: $CONNS connections x $STREAMS streams; h1: $((CONNS * STREAMS)) connections" >&2
for r in $(seq 1 "$ROUNDS"); do
  for arm in kvgate nginx; do for proto in h2 h1; do run_arm "$arm" "$proto" "$r"; done; done
done
column -s, -t "$W/results.csv"
cp "$W/results.csv" "${BENCH_OUT:-/tmp/h2_bench_results.csv}"
