#!/usr/bin/env bash
# HTTP/2 to the engines (`backend_protocol: http2`), side by side in one run: the same HTTP/1.1
# load (h2load --h1) through kvgate with HTTP/1.1 keep-alive to the upstream, through kvgate with
# HTTP/2 (h2c, requests multiplexed over shared connections), and through nginx (proxy_pass over
# HTTP/1.1 keep-alive: nginx's proxy does not speak HTTP/2 to upstreams), arms alternated ROUNDS
# times. The upstream is one nginx answering a fixed ~300-byte JSON on an HTTP/1.1 port and on an
# h2c port.
#
# Layout (2 cores): the proxy under test on CPU 0 with one worker; the upstream and h2load on
# CPU 1. Usage:
#   bench/h2_backend_bench.sh [ROUNDS=3] [REQUESTS=200000] [CONNECTIONS=64]
# Prints per arm and round: requests/s, mean and max request time, proxy CPU per request, and the
# proxy's connections to the upstream at the end of the arm.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${1:-3}; N=${2:-200000}; CONNS=${3:-64}
BIN=${KVGATE_BIN:-build/kvgate}
for t in nginx h2load taskset ss; do command -v $t >/dev/null || { echo "missing $t: run scripts/setup.sh --bench" >&2; exit 1; }; done
W=$(mktemp -d /tmp/kvgate-h2backend.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
UP=$(freeport); UP2=$(freeport); NG=$(freeport); KV1=$(freeport); KV2=$(freeport)
BODY='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"2, 3 and 5."},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":24,"completion_tokens":7,"total_tokens":31}}'
mkdir -p "$W/up"
cat >"$W/up/nginx.conf" <<NGX
worker_processes 1; pid $W/up/nginx.pid; error_log $W/up/error.log warn; daemon off;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  client_body_buffer_size 16k; http2_max_concurrent_streams 128;
  server { listen 127.0.0.1:$UP backlog=4096; listen 127.0.0.1:$UP2 http2 backlog=4096;
    location / { default_type application/json; return 200 '$BODY'; } } }
NGX
nginx_proxy_conf "$W/ng" "$NG" "$UP"
printf '%s' '{"model":"bench-model","messages":[{"role":"user","content":"Name three primes."}],"max_tokens":8}' >"$W/body.json"

taskset -c 1 nginx -p "$W/up" -c "$W/up/nginx.conf" & pids+=($!)
taskset -c 0 nginx -p "$W/ng" -c "$W/ng/nginx.conf" & pids+=($!)
taskset -c 0 "$BIN" serve --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
API=$(kvgate_api "$W/kv.out")
for spec in "$KV1:$UP:http1" "$KV2:$UP2:http2"; do
  IFS=: read -r port up proto <<<"$spec"
  curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$port,\"protocol\":\"tcp\",\"mode\":4,\"sel\":0,\"backend_protocol\":\"$proto\"},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$up,\"weight\":1}]}" >/dev/null
done
sleep 0.5
for p in $NG $KV1 $KV2; do
  h2load --h1 -n 10 -c 1 -d "$W/body.json" -H 'content-type: application/json' "http://127.0.0.1:$p/v1/chat/completions" | grep -q "10 succeeded" \
    || { echo "port $p does not answer (nginx $NG, kvgate h1 $KV1, kvgate h2 $KV2)" >&2; cat "$W/kv.err" "$W"/ng/error.log >&2; exit 1; }
done

declare -A PAT=([kvgate-h1]="kvgate serve --workers 1" [kvgate-h2]="kvgate serve --workers 1" [nginx-h1]="nginx -p $W/ng")
declare -A PORT=([kvgate-h1]=$KV1 [kvgate-h2]=$KV2 [nginx-h1]=$NG)
declare -A UPPORT=([kvgate-h1]=$UP [kvgate-h2]=$UP2 [nginx-h1]=$UP)
HZ=$(getconf CLK_TCK)
echo "arm,round,rps,mean_ms,max_ms,cpu_us_per_req,failed,upstream_conns" >"$W/results.csv"
run_arm() {  # arm round
  local arm=$1 r=$2 before after conns
  before=$(proc_ticks "${PAT[$arm]}")
  taskset -c 1 h2load --h1 -c "$CONNS" -m 1 -n "$N" -d "$W/body.json" \
    -H 'content-type: application/json' "http://127.0.0.1:${PORT[$arm]}/v1/chat/completions" >"$W/h2load.txt"
  after=$(proc_ticks "${PAT[$arm]}")
  conns=$(ss -Htn state established "( dport = :${UPPORT[$arm]} )" | wc -l)
  /usr/bin/python3 bench/h2load_row.py "$W/h2load.txt" "$arm" "$r" "$((after - before))" "$HZ" "$conns" >>"$W/results.csv"
}
echo "h2load --h1: $ROUNDS rounds, $N requests over $CONNS client connections" >&2
for r in $(seq 1 "$ROUNDS"); do
  for arm in kvgate-h1 kvgate-h2 nginx-h1; do run_arm "$arm" "$r"; done
done
column -s, -t "$W/results.csv"
cp "$W/results.csv" "${BENCH_OUT:-/tmp/h2_backend_bench_results.csv}"
