#!/usr/bin/env bash
# Proxy overhead, side by side in one run: direct to the upstream, through kvgate, through nginx
# (proxy_pass + upstream keepalive) and through HAProxy, arms alternated ROUNDS times.
#
# Layout (2 cores): the proxy under test is pinned to CPU 0 with one worker/thread; the upstream
# (nginx returning a fixed ~300-byte JSON) and wrk share CPU 1. Every server listens on
# 127.0.0.1. Usage: bench/proxy_bench.sh [ROUNDS=3] [SECONDS=10] [CONNECTIONS=64]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${1:-3}; DURATION=${2:-10}; CONNS=${3:-64}
BIN=${KVGATE_BIN:-build/kvgate}
for t in nginx haproxy wrk taskset; do command -v $t >/dev/null || { echo "missing $t: run scripts/setup.sh --bench" >&2; exit 1; }; done
W=$(mktemp -d /tmp/kvgate-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
UP=$(freeport); NG=$(freeport); HA=$(freeport); KV=$(freeport)
BODY='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"2, 3 and 5."},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":24,"completion_tokens":7,"total_tokens":31}}'

nginx_upstream_conf "$W/up" "$UP" "$BODY"
nginx_proxy_conf "$W/ng" "$NG" "$UP"
cat >"$W/haproxy.cfg" <<HAP
global
  nbthread 1
  maxconn 8000
defaults
  mode http
  timeout connect 5s
  timeout client 300s
  timeout server 300s
  option http-keep-alive
  http-reuse always
frontend f
  bind 127.0.0.1:$HA
  default_backend b
backend b
  server s1 127.0.0.1:$UP maxconn 2000
HAP

taskset -c 1 nginx -p "$W/up" -c "$W/up/nginx.conf" & pids+=($!)
taskset -c 0 nginx -p "$W/ng" -c "$W/ng/nginx.conf" & pids+=($!)
taskset -c 0 haproxy -f "$W/haproxy.cfg" -db >"$W/haproxy.log" 2>&1 & pids+=($!)
taskset -c 0 "$BIN" serve --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
KVPID=$!
for _ in $(seq 1 50); do grep -q ready "$W/kv.out" 2>/dev/null && break; sleep 0.1; done
API=$(sed -E 's/.*"api":"([^"]+)".*/\1/' "$W/kv.out")
curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$KV,\"protocol\":\"tcp\",\"mode\":4,\"sel\":0},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$UP,\"weight\":1}]}" >/dev/null
sleep 0.5
for p in $UP $NG $HA $KV; do curl -sf --retry 5 --retry-connrefused --retry-delay 1 -o /dev/null -X POST "http://127.0.0.1:$p/v1/chat/completions" -d '{}' || { echo "port $p not serving (upstream $UP, nginx $NG, haproxy $HA, kvgate $KV)" >&2; cat "$W"/*.log "$W"/*/error.log "$W/kv.err" >&2; exit 1; }; done

declare -A PAT=([direct]="" [kvgate]="kvgate serve --workers 1" [nginx]="nginx -p $W/ng" [haproxy]="haproxy -f $W/haproxy.cfg")
declare -A PORT=([direct]=$UP [kvgate]=$KV [nginx]=$NG [haproxy]=$HA)
HZ=$(getconf CLK_TCK)
echo "arm,round,rps,p50_us,p99_us,cpu_us_per_req" >"$W/results.csv"
run_arm() {  # label arm round connections threads duration
  local label=$1 arm=$2 r=$3 c=$4 t=$5 d=$6 before=0 after=0
  [ -n "${PAT[$arm]}" ] && before=$(proc_ticks "${PAT[$arm]}")
  taskset -c 1 wrk -t"$t" -c"$c" -d"${d}s" --latency -s bench/post.lua "http://127.0.0.1:${PORT[$arm]}/v1/chat/completions" >"$W/wrk.txt"
  [ -n "${PAT[$arm]}" ] && after=$(proc_ticks "${PAT[$arm]}")
  cp "$W/wrk.txt" /tmp/last_wrk.txt; /usr/bin/python3 - "$W/wrk.txt" "$label" "$r" "$((after - before))" "$HZ" >>"$W/results.csv" <<'PY'
import re, sys
txt = open(sys.argv[1]).read(); arm, rnd, ticks, hz = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
if '50%' not in txt:
    sys.exit(f"wrk output for {arm} round {rnd} has no latency distribution:\n{txt}")
def us(v):
    m = re.match(r'([\d.]+)(us|ms|s|m)$', v)
    if not m: sys.exit(f"unparsable latency {v!r} in:\n{txt}")
    x = float(m.group(1))
    return x * {'us': 1, 'ms': 1e3, 's': 1e6, 'm': 6e7}[m.group(2)]
rps = float(re.search(r'Requests/sec:\s+([\d.]+)', txt).group(1))
reqs = int(re.search(r'(\d+) requests in', txt).group(1))
p50 = us(re.search(r'^\s+50%\s+(\S+)', txt, re.M).group(1)); p99 = us(re.search(r'^\s+99%\s+(\S+)', txt, re.M).group(1))
errs = re.search(r'Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)', txt)
if errs: print(f"# {arm} round {rnd}: {errs.group(0)}", file=sys.stderr)
cpu = ticks * 1e6 / hz / reqs if ticks else 0
print(f"{arm},{rnd},{rps:.0f},{p50:.0f},{p99:.0f},{cpu:.2f}")
PY
}
echo "throughput: $ROUNDS rounds x 4 arms, ${DURATION}s each, $CONNS connections, wrk 1 thread on CPU 1" >&2
for r in $(seq 1 "$ROUNDS"); do
  for arm in direct kvgate nginx haproxy; do run_arm "$arm" "$arm" "$r" "$CONNS" 1 "$DURATION"; done
done
echo "latency: 1 connection, ${DURATION}s per arm, $ROUNDS rounds, split layout (proxy CPU 0)" >&2
for r in $(seq 1 "$ROUNDS"); do
  for arm in direct kvgate nginx; do run_arm "$arm-c1" "$arm" "$r" 1 1 "$DURATION"; done
done
# Same-core layout: every process on CPU 1, so a request crosses no CPU (no idle-CPU wake-ups):
# the added latency is then the proxy's own work plus one more loopback hop each way.
for p in $(pgrep -f "nginx -p $W/ng") $(pgrep -f "haproxy -f $W") $KVPID; do
  for t in $p $(pgrep -P "$p"); do taskset -a -p -c 1 "$t" >/dev/null; done
done
echo "latency: 1 connection, same-core layout (all on CPU 1)" >&2
for r in $(seq 1 "$ROUNDS"); do
  for arm in direct kvgate nginx; do run_arm "$arm-c1same" "$arm" "$r" 1 1 "$DURATION"; done
done
/usr/bin/python3 bench/report_proxy.py "$W/results.csv"
cp "$W/results.csv" "${BENCH_OUT:-/tmp/proxy_bench_results.csv}"
