#!/usr/bin/env bash
# System calls per proxied request, counted by strace -c (a count, not a time: repeatable on a
# busy machine): kvgate serve --workers 1 and nginx (proxy_pass, upstream keepalive, one worker)
# in front of the same upstream (nginx returning a fixed JSON), wrk -c64 for SECONDS each; every
# thread of the proxy traced. Prints per request the calls of each kind and those that failed
# (EAGAIN mostly: a read that found nothing).
# Usage: bench/proxy_syscalls.sh [SECONDS=5] [CONNECTIONS=64]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
DURATION=${1:-5}; CONNS=${2:-64}
BIN=${KVGATE_BIN:-build/kvgate}
for t in nginx wrk strace; do command -v $t >/dev/null || { echo "missing $t: run scripts/setup.sh --bench and install strace" >&2; exit 1; }; done
W=$(mktemp -d /tmp/kvgate-sysc.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
UP=$(freeport); NG=$(freeport); KV=$(freeport)
nginx_upstream_conf "$W/up" "$UP" '{"ok":1}'
nginx_proxy_conf "$W/ng" "$NG" "$UP" "master_process off; "
nginx -p "$W/up" -c "$W/up/nginx.conf" & pids+=($!)
nginx -p "$W/ng" -c "$W/ng/nginx.conf" & pids+=($!)
NGPID=$!
"$BIN" serve --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
KVPID=$!
for _ in $(seq 1 50); do grep -q ready "$W/kv.out" 2>/dev/null && break; sleep 0.1; done
API=$(sed -E 's/.*"api":"([^"]+)".*/\1/' "$W/kv.out")
curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$KV,\"protocol\":\"tcp\",\"mode\":4,\"sel\":0},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$UP,\"weight\":1}]}" >/dev/null
sleep 0.5
for p in $UP $NG $KV; do curl -sf --retry 5 --retry-connrefused --retry-delay 1 -o /dev/null -X POST "http://127.0.0.1:$p/v1/chat/completions" -d '{}'; done
# TRACE=FILE: instead of counting, write kvgate's receive/send/epoll calls there (strace -tt).
if [ -n "${TRACE:-}" ]; then
  strace -f -q -tt -p "$KVPID" -e trace=recvfrom,sendmsg,epoll_wait,epoll_ctl -o "$TRACE" & st=$!
  sleep 0.5
  wrk -t1 -c"$CONNS" -d"${DURATION}s" -s bench/post.lua "http://127.0.0.1:$KV/v1/chat/completions" >/dev/null
  kill -INT $st; wait $st 2>/dev/null || true
  exit 0
fi
echo "| proxy | requests | syscall | calls per request | failed per request |"
echo "|---|---|---|---|---|"
for arm in kvgate nginx; do
  pid=$KVPID port=$KV; [ $arm = nginx ] && pid=$NGPID port=$NG
  strace -c -f -q -p "$pid" -o "$W/$arm.strace" & st=$!
  sleep 0.5
  wrk -t1 -c"$CONNS" -d"${DURATION}s" -s bench/post.lua "http://127.0.0.1:$port/v1/chat/completions" >"$W/$arm.wrk"
  kill -INT $st; wait $st 2>/dev/null || true
  reqs=$(grep -oE '[0-9]+ requests in' "$W/$arm.wrk" | awk '{print $1}')
  # strace -c rows: % time, seconds, usecs/call, calls, [errors], syscall
  awk -v arm=$arm -v n="$reqs" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" {
      calls=$4; errs=(NF==6)?$5:0; if (calls/n >= 0.005) printf "| %s | %d | %s | %.3f | %.3f |\n", arm, n, $NF, calls/n, errs/n }' "$W/$arm.strace"
done
