#!/usr/bin/env bash
# Streaming at scale: STREAMS concurrent SSE streams of EVENTS events spaced ITL ms, from the
# simulator, measured direct and through kvgate in the same run. Per-event relay delay comes from
# the simulator's send stamps (sim --stamp-events); kvgate's memory per open stream is its RSS
# at the peak minus its idle RSS, divided by the streams open. TLS=1 adds kvgate-tls (a rule with
# security 1) and nginx-tls (listen ... ssl) arms: the same streams over TLS, one ECDSA P-256
# certificate for both, a handshake per stream. ROUNDS rounds run on the same processes (a
# process that has served a round before behaves differently: issue 34); after the table, the
# worst p99 of each arm over the rounds, kvgate's event-loop lag histogram
# (kvgate_worker_loop_lag_seconds) over the whole run, its stalls by cause and its warnings.
# H2=K adds kvgate-h2 and nginx-h2 arms: the same streams over HTTP/2 (h2c by prior knowledge),
# K streams per connection (issue 30's goal: p99 and memory per open stream against nginx's);
# ARMS="direct kvgate-h2 nginx-h2" runs only those arms (e.g. memory per stream on processes
# that served nothing else before);
# PERF_SYSCALLS=1 adds each relay's system calls per event (perf stat), after the tables;
# THREADS=1 lists kvgate's threads' CPU ticks and context switches after each kvgate arm;
# PERF_RECORD=DIR writes each relay arm's top symbols (perf record -g) to DIR/round<r>-<arm>.txt
# (and the profile itself, .data).
# Usage: [SERVE_ENV="VAR=value ..."] [H2=K] [PERF_SYSCALLS=1] [PERF_RECORD=DIR] [THREADS=1] bench/sse_bench.sh [STREAMS=1000] [EVENTS=200] [ITL_MS=20]
#        [ROUNDS=5] [TLS=0]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
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
VIP=$(freeport)
curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$VIP,\"protocol\":\"tcp\",\"mode\":4,\"sse_mode\":true},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$SIMPORT,\"weight\":1}]}" >/dev/null
VIPTLS=""
if [ "$TLS" = 1 ]; then
  VIPTLS=$(freeport)
  curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$VIPTLS,\"protocol\":\"tcp\",\"mode\":4,\"sse_mode\":true,\"security\":1},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$SIMPORT,\"weight\":1}]}" >/dev/null
fi
# nginx as a reference relay for the same streams (proxy_buffering off, as for SSE), if present.
NGX=""; NGXTLS=""; NGXTLSCONF=""; NGXH2=""; NGXH2CONF=""
if command -v nginx >/dev/null; then
  NGX=$(freeport)
  if [ "$TLS" = 1 ]; then
    NGXTLS=$(freeport)
    NGXTLSCONF=$(nginx_tls_relay_server "$NGXTLS" "$W/cert.pem" "$W/key.pem")
  fi
  if [ -n "${H2:-}" ]; then
    NGXH2=$(freeport)
    NGXH2CONF="server { listen 127.0.0.1:$NGXH2 http2 backlog=4096; http2_max_concurrent_streams 1000;
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
  $NGXTLSCONF
  $NGXH2CONF }
NGXC
  nginx -p "$W/ng" -c "$W/ng/nginx.conf" & pids+=($!)
  NGPID=$!
  sleep 0.3
fi
# CPU ticks (utime+stime, 1/100 s) of a process and its children.
cpu_ticks() { local t=0 p; for p in $1 $(pgrep -P "$1" || true); do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo $t; }
# Run-queue wait (ready, no CPU) of every thread of a process and its children, ms.
wait_ms() { local t=0 p f; for p in $1 $(pgrep -P "$1" || true); do for f in /proc/$p/task/*/schedstat; do t=$((t + $(awk '{print $2}' "$f" 2>/dev/null || echo 0))); done; done; echo $((t / 1000000)); }
# RSS of a process and its children, KiB.
rss_kb() { local t=0 p; for p in $1 $(pgrep -P "$1" || true); do t=$((t + $(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0))); done; echo $t; }
sleep 0.5
# kvgate's event-loop probe: ticks >= 10 ms late, all ticks, stalls by cause (busy, cpu_wait,
# steal, blocked) and the workers' CPU-wait seconds (kvgate_worker_loop_* and _cpu_wait_*).
lag_ticks() {
  curl -sf "$API/metrics" | awk '/^kvgate_worker_loop_lag_seconds_bucket/ {
      if ($0 ~ /le="\+Inf"/) all += $2; else if ($0 ~ /le="0.01"/) under += $2 }
    /^kvgate_worker_loop_stalls_total/ { match($0, /cause="[a-z_]+"/); c[substr($0, RSTART + 7, RLENGTH - 8)] += $2 }
    /^kvgate_worker_cpu_wait_seconds_total/ { wait += $2 }
    END { printf "%d %d %d %d %d %d %.0f\n", all - under, all, c["busy"], c["cpu_wait"], c["steal"], c["blocked"], wait * 1000 }'
}
echo "| round | arm | streams completed | errors | events | delay p50 us | p90 us | p99 us | p99.9 us | max us | relay peak RSS - idle (KiB) | relay CPU us/event | kvgate loop ticks >= 10 ms late | stalls busy/cpu_wait/steal/blocked | worker CPU wait ms | relay threads CPU wait ms | p99 us while streams start / after | setup p50/p99 us | load generator CPU % of a core |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  for arm in ${ARMS:-direct kvgate ${NGX:+nginx} ${VIPTLS:+kvgate-tls} ${NGXTLS:+nginx-tls} ${H2:+kvgate-h2} ${NGXH2:+nginx-h2}}; do
    port=$SIMPORT; tlsflag=()
    case $arm in
      kvgate) port=$VIP ;; nginx) port=$NGX ;;
      kvgate-h2) port=$VIP; tlsflag=(--h2 "$H2") ;; nginx-h2) port=$NGXH2; tlsflag=(--h2 "$H2") ;;
      kvgate-tls) port=$VIPTLS; tlsflag=(--tls) ;; nginx-tls) port=$NGXTLS; tlsflag=(--tls) ;;
    esac
    RELAY=$KVPID; case $arm in nginx*) RELAY=$NGPID ;; esac
    idle=$(rss_kb "$RELAY"); peak=$idle; c0=$(cpu_ticks "$RELAY"); rw0=$(wait_ms "$RELAY"); read -r late0 all0 b0 q0 s0 k0 wt0 < <(lag_ticks)
    # PERF_SYSCALLS=1: the relay's system calls during the arm (perf stat on its threads).
    sp=""
    if [ "${PERF_SYSCALLS:-0}" = 1 ] && [ "$arm" != direct ]; then
      perf stat -x, -o "$W/sys.csv" -e 'syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_writev,syscalls:sys_enter_readv,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_timerfd_settime,syscalls:sys_enter_futex,syscalls:sys_enter_madvise,syscalls:sys_enter_mprotect,syscalls:sys_enter_brk,syscalls:sys_enter_mmap,syscalls:sys_enter_munmap' \
        -p "$(echo "$RELAY" $(pgrep -P "$RELAY" || true) | tr ' ' ,)" 2>/dev/null & sp=$!
      sleep 0.3
    fi
    # PERF_RECORD=DIR: a CPU profile of the relay during the arm, its top symbols in DIR.
    pr=""
    if [ -n "${PERF_RECORD:-}" ] && [ "$arm" != direct ]; then
      mkdir -p "$PERF_RECORD"
      perf record -q -F 999 -g -o "$W/perf.data" -p "$(echo "$RELAY" $(pgrep -P "$RELAY" || true) | tr ' ' ,)" >/dev/null 2>&1 & pr=$!
      sleep 0.3
    fi
    /usr/bin/time -f "%e %U %S" -o "$W/client.time" "$BIN" bench sse --target "127.0.0.1:$port" --streams "$STREAMS" --events "$EVENTS" --ramp-ms 2000 "${tlsflag[@]}" >"$W/res.json" &
    bp=$!
    while kill -0 $bp 2>/dev/null; do r2=$(rss_kb "$RELAY"); [ "$r2" -gt "$peak" ] && peak=$r2; sleep 0.2; done
    wait $bp || true
    if [ -n "$pr" ]; then
      kill -INT "$pr" 2>/dev/null || true; wait "$pr" 2>/dev/null || true
      { perf report -i "$W/perf.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]'
        echo
        perf report -i "$W/perf.data" --no-children --sort dso,symbol --percent-limit 0.3 --stdio 2>/dev/null \
          | grep -E '^ +[0-9]' | sed -E 's/ +- +- +$//' | cut -c1-160; } >"$PERF_RECORD/round$r-$arm.txt" || true
      cp "$W/perf.data" "$PERF_RECORD/round$r-$arm.data"
    fi
    if [ -n "${THREADS:-}" ] && [ "$RELAY" = "$KVPID" ]; then
      echo "threads of kvgate after round $r, $arm (name tid utime+stime ticks, voluntary/involuntary switches):" >>"$W/threads.txt"
      for f in /proc/$KVPID/task/*; do echo "  $(cat $f/comm) ${f##*/} $(awk '{print $14+$15}' $f/stat) $(awk '/^voluntary_ctxt/ {v=$2} /^nonvoluntary_ctxt/ {n=$2} END {print v"/"n}' $f/status)"; done >>"$W/threads.txt"
    fi
    if [ -n "$sp" ]; then
      kill -INT "$sp" 2>/dev/null || true; wait "$sp" 2>/dev/null || true
      echo "syscalls per event, round $r, $arm: $(awk -F, -v ev=$((STREAMS * EVENTS)) '$3 ~ /sys_enter/ && $1 > 0 { sub("syscalls:sys_enter_", "", $3); printf "%s %.2f  ", $3, $1 / ev }' "$W/sys.csv")" >>"$W/syscalls.txt"
    fi
    c1=$(cpu_ticks "$RELAY"); rw1=$(wait_ms "$RELAY"); read -r late1 all1 b1 q1 s1 k1 wt1 < <(lag_ticks)
    lag="$((late1 - late0))/$((all1 - all0))"; causes="$((b1 - b0))/$((q1 - q0))/$((s1 - s0))/$((k1 - k0))"
    waitms=$((wt1 - wt0)); case $arm in kvgate*) ;; *) lag="n/a"; causes="n/a"; waitms="n/a" ;; esac
    client_cpu=$(awk 'NR == 1 && $1 > 0 { printf "%.0f", 100 * ($2 + $3) / $1 }' "$W/client.time" 2>/dev/null || echo -)
    /usr/bin/python3 - "$W/res.json" "$r" "$arm" "$((peak - idle))" "$((c1 - c0))" "$lag" "$causes" "$waitms" "$((rw1 - rw0))" "$client_cpu" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); d = j['delay_us']
relay = sys.argv[3] != 'direct'
mem = sys.argv[4] if relay else 'n/a'
cpu = f"{int(sys.argv[5]) * 10000 / max(1, j['events']):.1f}" if relay else 'n/a'
print(f"| {sys.argv[2]} | {sys.argv[3]} | {j['completed']}/{j['streams']} | {j['errors']} | {j['events']} | {d['p50']} | {d['p90']} | {d['p99']} | {d['p999']} | {d['max']} | {mem} | {cpu} | {sys.argv[6]} | {sys.argv[7]} | {sys.argv[8]} | {sys.argv[9] if relay else 'n/a'} | {j.get('ramp_delay_us', {}).get('p99', '-')} / {j.get('steady_delay_us', {}).get('p99', '-')} | {j.get('setup_us', {}).get('p50', '-')}/{j.get('setup_us', {}).get('p99', '-')} | {sys.argv[10]} |")
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
curl -sf "$API/metrics" | grep -E '^kvgate_worker_(loop_lag_seconds|loop_stalls_total|cpu_seconds_total|cpu_wait_seconds_total)' || true
[ -f "$W/syscalls.txt" ] && { echo; cat "$W/syscalls.txt"; }
[ -f "$W/threads.txt" ] && { echo; cat "$W/threads.txt"; }
echo
echo "kvgate's stall warnings (at most one a second per worker):"
grep -h "event loop ran" "$W/kv.err" "$W/kv.out" 2>/dev/null | tail -40 || true
