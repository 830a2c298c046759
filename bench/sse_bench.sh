#!/usr/bin/env bash
# Streaming at scale: STREAMS concurrent SSE streams of EVENTS events spaced ITL ms, from the
# simulator, measured direct and through kvgate in the same run. Per-event relay delay comes from
# the simulator's send stamps (sim --stamp-events); kvgate's memory per open stream is its RSS
# at the peak minus its idle RSS, divided by the streams open. TLS=1 adds kvgate-tls (a rule with
# security 1) and nginx-tls (listen ... ssl) arms: the same streams over TLS, one ECDSA P-256
# certificate for both, a handshake per stream. ROUNDS rounds run on the same processes (a
# process that has served a round before behaves differently: issue 34); after the table, the
# worst p99 of each arm over the rounds, and kvgate's event-loop lag histogram
# (kvgate_worker_loop_lag_seconds) over the whole run.
# Usage: [SERVE_ENV="VAR=value ..."] bench/sse_bench.sh [STREAMS=1000] [EVENTS=200] [ITL_MS=20]
#        [ROUNDS=5] [TLS=0]
set -euo pipefail
cd "$(dirname "$0")/.."
STREAMS=${1:-1000}; EVENTS=${2:-200}; ITL=${3:-20}; ROUNDS=${4:-5}; TLS=${5:-0}
BIN=${KVGATE_BIN:-build/kvgate}
W=$(mktemp -d /tmp/kvgate-sse.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
"$BIN" sim --workers 1 --port 0 --timing fixed --stamp-events --itl-ms "$ITL" --prefill-base-ms 0 \
  --prefill-us-per-token 0 --max-concurrency 100000 >"$W/sim.out" 2>"$W/sim.err" & pids+=($!)
TLSARGS=()
if [ "$TLS" = 1 ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=127.0.0.1 -keyout "$W/key.pem" -out "$W/cert.pem" 2>/dev/null
  TLSARGS=(--tls-cert "$W/cert.pem" --tls-key "$W/key.pem")
fi
# SERVE_ENV (e.g. LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2): variables for the
# gateway only, for A/B runs of its allocator.
env ${SERVE_ENV:-} "$BIN" serve --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" "${TLSARGS[@]}" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
KVPID=$!
for _ in $(seq 1 50); do grep -q ready "$W/kv.out" 2>/dev/null && grep -q ready "$W/sim.out" 2>/dev/null && break; sleep 0.1; done
SIMPORT=$(sed -E 's/.*"port":([0-9]+).*/\1/' "$W/sim.out" | head -1)
API=$(sed -E 's/.*"api":"([^"]+)".*/\1/' "$W/kv.out")
VIP=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$VIP,\"protocol\":\"tcp\",\"mode\":4,\"sse_mode\":true},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$SIMPORT,\"weight\":1}]}" >/dev/null
VIPTLS=""
if [ "$TLS" = 1 ]; then
  VIPTLS=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$VIPTLS,\"protocol\":\"tcp\",\"mode\":4,\"sse_mode\":true,\"security\":1},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$SIMPORT,\"weight\":1}]}" >/dev/null
fi
# nginx as a reference relay for the same streams (proxy_buffering off, as for SSE), if present.
NGX=""; NGXTLS=""; NGXTLSCONF=""
if command -v nginx >/dev/null; then
  NGX=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  if [ "$TLS" = 1 ]; then
    NGXTLS=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    NGXTLSCONF="server { listen 127.0.0.1:$NGXTLS ssl backlog=4096;
    ssl_certificate $W/cert.pem; ssl_certificate_key $W/key.pem; ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache off; ssl_session_tickets off;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\";
                 proxy_buffering off; proxy_read_timeout 300s; } }"
  fi
  mkdir -p "$W/ng"
  cat >"$W/ng/nginx.conf" <<NGXC
worker_processes 1; pid $W/ng/nginx.pid; error_log $W/ng/error.log warn; daemon off;
events { worker_connections 20000; }
http { access_log off;
  upstream up { server 127.0.0.1:$SIMPORT; keepalive 256; }
  server { listen 127.0.0.1:$NGX backlog=4096;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_buffering off; proxy_read_timeout 300s; } }
  $NGXTLSCONF }
NGXC
  nginx -p "$W/ng" -c "$W/ng/nginx.conf" & pids+=($!)
  NGPID=$!
  sleep 0.3
fi
# CPU ticks (utime+stime, 1/100 s) of a process and its children.
cpu_ticks() { local t=0 p; for p in $1 $(pgrep -P "$1" || true); do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo $t; }
# RSS of a process and its children, KiB.
rss_kb() { local t=0 p; for p in $1 $(pgrep -P "$1" || true); do t=$((t + $(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0))); done; echo $t; }
sleep 0.5
# kvgate's event-loop lag ticks: "late-by-10ms-or-more total" from its histogram (all workers).
lag_ticks() {
  curl -sf "$API/metrics" | awk '/^kvgate_worker_loop_lag_seconds_bucket/ {
      if ($0 ~ /le="\+Inf"/) all += $2; else if ($0 ~ /le="0.01"/) under += $2 }
    END { printf "%d %d\n", all - under, all }'
}
echo "| round | arm | streams completed | errors | events | delay p50 us | p90 us | p99 us | p99.9 us | max us | relay peak RSS - idle (KiB) | relay CPU us/event | kvgate loop ticks >= 10 ms late |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  for arm in direct kvgate ${NGX:+nginx} ${VIPTLS:+kvgate-tls} ${NGXTLS:+nginx-tls}; do
    port=$SIMPORT; tlsflag=()
    case $arm in
      kvgate) port=$VIP ;; nginx) port=$NGX ;;
      kvgate-tls) port=$VIPTLS; tlsflag=(--tls) ;; nginx-tls) port=$NGXTLS; tlsflag=(--tls) ;;
    esac
    RELAY=$KVPID; case $arm in nginx*) RELAY=$NGPID ;; esac
    idle=$(rss_kb "$RELAY"); peak=$idle; c0=$(cpu_ticks "$RELAY"); read -r late0 all0 < <(lag_ticks)
    "$BIN" bench sse --target "127.0.0.1:$port" --streams "$STREAMS" --events "$EVENTS" --ramp-ms 2000 "${tlsflag[@]}" >"$W/res.json" &
    bp=$!
    while kill -0 $bp 2>/dev/null; do r2=$(rss_kb "$RELAY"); [ "$r2" -gt "$peak" ] && peak=$r2; sleep 0.2; done
    wait $bp || true
    c1=$(cpu_ticks "$RELAY"); read -r late1 all1 < <(lag_ticks)
    lag="$((late1 - late0))/$((all1 - all0))"; case $arm in kvgate*) ;; *) lag="n/a" ;; esac
    /usr/bin/python3 - "$W/res.json" "$r" "$arm" "$((peak - idle))" "$((c1 - c0))" "$lag" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); d = j['delay_us']
relay = sys.argv[3] != 'direct'
mem = sys.argv[4] if relay else 'n/a'
cpu = f"{int(sys.argv[5]) * 10000 / max(1, j['events']):.1f}" if relay else 'n/a'
print(f"| {sys.argv[2]} | {sys.argv[3]} | {j['completed']}/{j['streams']} | {j['errors']} | {j['events']} | {d['p50']} | {d['p90']} | {d['p99']} | {d['p999']} | {d['max']} | {mem} | {cpu} | {sys.argv[6]} |")
PY
    echo -e "$arm\t$r\t$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["delay_us"]["p99"])' "$W/res.json")" >>"$W/p99.tsv"
  done
done
echo
echo "| arm | worst p99 us (round) over $ROUNDS rounds |"
echo "|---|---|"
/usr/bin/python3 - "$W/p99.tsv" <<'PY'
import sys
worst = {}
for line in open(sys.argv[1]):
    arm, r, p99 = line.split()
    if arm not in worst or int(p99) > worst[arm][0]:
        worst[arm] = (int(p99), r)
for arm, (p99, r) in worst.items():
    print(f"| {arm} | {p99} ({r}) |")
PY
echo
echo "kvgate event-loop lag over the run (kvgate_worker_loop_lag_seconds, cumulative buckets):"
curl -sf "$API/metrics" | grep '^kvgate_worker_loop_lag_seconds' || true
