#!/usr/bin/env bash
# TLS termination cost, side by side in one run: kvgate and nginx each in front of the same
# upstream (nginx returning a fixed ~300-byte JSON), plain and with TLS (kvgate: a rule with
# security 1 and serve --tls-cert; nginx: listen ... ssl, the same certificate, TLS 1.2/1.3),
# arms alternated ROUNDS times. Two load shapes: CONNECTIONS keep-alive connections (the record
# layer's cost), and a new connection per request (Connection: close: the handshake's cost).
#
# Layout (2 cores): the proxy under test on CPU 0 with one worker; upstream and wrk on CPU 1.
# Usage: bench/tls_bench.sh [ROUNDS=3] [SECONDS=10] [CONNECTIONS=64]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh  # (proc_ticks)
ROUNDS=${1:-3}; DURATION=${2:-10}; CONNS=${3:-64}
BIN=${KVGATE_BIN:-build/kvgate}
for t in nginx wrk taskset openssl; do command -v $t >/dev/null || { echo "missing $t: run scripts/setup.sh --bench" >&2; exit 1; }; done
W=$(mktemp -d /tmp/kvgate-tlsbench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
UP=$(freeport); NG=$(freeport); NGS=$(freeport); KV=$(freeport); KVS=$(freeport)
BODY='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"2, 3 and 5."},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":24,"completion_tokens":7,"total_tokens":31}}'

# One ECDSA P-256 certificate for 127.0.0.1 (what a production gateway would use), both proxies.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
  -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout "$W/key.pem" -out "$W/cert.pem" 2>/dev/null

mkdir -p "$W/up" "$W/ng"
cat >"$W/up/nginx.conf" <<NGX
worker_processes 1; pid $W/up/nginx.pid; error_log $W/up/error.log warn; daemon off;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  server { listen 127.0.0.1:$UP backlog=4096;
    location / { default_type application/json; return 200 '$BODY'; } } }
NGX
cat >"$W/ng/nginx.conf" <<NGX
worker_processes 1; pid $W/ng/nginx.pid; error_log $W/ng/error.log warn; daemon off;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  ssl_certificate $W/cert.pem; ssl_certificate_key $W/key.pem; ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache off; ssl_session_tickets off;
  upstream up { server 127.0.0.1:$UP; keepalive 256; keepalive_requests 10000000; }
  server { listen 127.0.0.1:$NG backlog=4096; listen 127.0.0.1:$NGS ssl backlog=4096;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NGX
taskset -c 1 nginx -p "$W/up" -c "$W/up/nginx.conf" & pids+=($!)
taskset -c 0 nginx -p "$W/ng" -c "$W/ng/nginx.conf" & pids+=($!)
taskset -c 0 "$BIN" serve --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" \
  --tls-cert "$W/cert.pem" --tls-key "$W/key.pem" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
for _ in $(seq 1 50); do grep -q ready "$W/kv.out" 2>/dev/null && break; sleep 0.1; done
API=$(sed -E 's/.*"api":"([^"]+)".*/\1/' "$W/kv.out")
for spec in "$KV 0" "$KVS 1"; do
  set -- $spec
  curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$1,\"protocol\":\"tcp\",\"mode\":4,\"sel\":0,\"security\":$2},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$UP,\"weight\":1}]}" >/dev/null
done
sleep 0.5
for u in "http://127.0.0.1:$KV" "https://127.0.0.1:$KVS" "http://127.0.0.1:$NG" "https://127.0.0.1:$NGS"; do
  curl -sfk --retry 5 --retry-connrefused --retry-delay 1 -o /dev/null -X POST "$u/v1/chat/completions" -d '{}' || { echo "$u not serving" >&2; cat "$W/kv.err" "$W"/*/error.log >&2; exit 1; }
done

declare -A PAT=([kvgate]="kvgate serve --workers 1" [kvgate-tls]="kvgate serve --workers 1" [nginx]="nginx -p $W/ng" [nginx-tls]="nginx -p $W/ng")
declare -A URL=([kvgate]="http://127.0.0.1:$KV" [kvgate-tls]="https://127.0.0.1:$KVS" [nginx]="http://127.0.0.1:$NG" [nginx-tls]="https://127.0.0.1:$NGS")
HZ=$(getconf CLK_TCK)
echo "arm,round,rps,p50_us,p99_us,cpu_us_per_req" >"$W/results.csv"
run_arm() {  # label arm round connections extra-wrk-args...
  local label=$1 arm=$2 r=$3 c=$4; shift 4
  local before after
  before=$(proc_ticks "${PAT[$arm]}")
  taskset -c 1 wrk -t1 -c"$c" -d"${DURATION}s" --latency -s bench/post.lua "$@" "${URL[$arm]}/v1/chat/completions" >"$W/wrk.txt"
  after=$(proc_ticks "${PAT[$arm]}")
  /usr/bin/python3 - "$W/wrk.txt" "$label" "$r" "$((after - before))" "$HZ" >>"$W/results.csv" <<'PY'
import re, sys
txt = open(sys.argv[1]).read(); arm, rnd, ticks, hz = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
if '50%' not in txt: sys.exit(f"wrk output for {arm} round {rnd} has no latency distribution:\n{txt}")
def us(v):
    m = re.match(r'([\d.]+)(us|ms|s|m)$', v)
    return float(m.group(1)) * {'us': 1, 'ms': 1e3, 's': 1e6, 'm': 6e7}[m.group(2)]
rps = float(re.search(r'Requests/sec:\s+([\d.]+)', txt).group(1))
reqs = int(re.search(r'(\d+) requests in', txt).group(1))
p50 = us(re.search(r'^\s+50%\s+(\S+)', txt, re.M).group(1)); p99 = us(re.search(r'^\s+99%\s+(\S+)', txt, re.M).group(1))
errs = re.search(r'Non-2xx or 3xx responses: (\d+)', txt)
if errs: print(f"# {arm} round {rnd}: {errs.group(0)}", file=sys.stderr)
print(f"{arm},{rnd},{rps:.0f},{p50:.0f},{p99:.0f},{ticks * 1e6 / hz / reqs if ticks else 0:.2f}")
PY
}
for r in $(seq 1 "$ROUNDS"); do
  for arm in kvgate kvgate-tls nginx nginx-tls; do run_arm "$arm" "$arm" "$r" "$CONNS"; done
  for arm in kvgate-tls nginx-tls; do run_arm "$arm-newconn" "$arm" "$r" 16 -H "Connection: close"; done
done
/usr/bin/python3 - "$W/results.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
arms = []
for r in rows:
    if r['arm'] not in arms: arms.append(r['arm'])
med = {a: {k: statistics.median(float(r[k]) for r in rows if r['arm'] == a) for k in ('rps', 'p50_us', 'p99_us', 'cpu_us_per_req')} for a in arms}
print("| arm | req/s (median) | p50 us | p99 us | proxy CPU us/req |")
print("|---|---|---|---|---|")
for a in arms:
    m = med[a]; print(f"| {a} | {m['rps']:.0f} | {m['p50_us']:.0f} | {m['p99_us']:.0f} | {m['cpu_us_per_req']:.1f} |")
def ratio(a, b): return med[a]['rps'] / med[b]['rps']
print()
print(f"kvgate-tls / nginx-tls req/s: {ratio('kvgate-tls', 'nginx-tls'):.2f}x; "
      f"new connection per request: {ratio('kvgate-tls-newconn', 'nginx-tls-newconn'):.2f}x; "
      f"kvgate plain / nginx plain: {ratio('kvgate', 'nginx'):.2f}x; "
      f"TLS cost kvgate {1 - ratio('kvgate-tls', 'kvgate'):.0%}, nginx {1 - ratio('nginx-tls', 'nginx'):.0%}")
PY
cp "$W/results.csv" "${BENCH_OUT:-/tmp/tls_bench_results.csv}"
