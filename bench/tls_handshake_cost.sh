#!/usr/bin/env bash
# Server cost of a full TLS handshake, kvgate against nginx, side by side in one run: openssl
# s_time opens new TLS 1.3 connections (handshake, then close, no request) for SECONDS against a
# kvgate rule with security 1 and against nginx (listen ... ssl, the same ECDSA P-256
# certificate, session tickets on as kvgate issues them, no session cache). Reports, per
# handshake, the server's CPU (utime+stime ticks of the process and its children) and its system
# calls (perf stat on its threads). ROUNDS alternations.
# Usage: bench/tls_handshake_cost.sh [ROUNDS=2] [SECONDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${1:-2}; DURATION=${2:-3}
BIN=${KVGATE_BIN:-build/kvgate}
for t in nginx openssl perf; do command -v $t >/dev/null || { echo "missing $t" >&2; exit 1; }; done
W=$(mktemp -d /tmp/kvgate-hs.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 \
  -keyout "$W/key.pem" -out "$W/cert.pem" 2>/dev/null
"$BIN" sim --workers 1 --port 0 --timing fixed >"$W/sim.out" 2>/dev/null & pids+=($!)
"$BIN" serve --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" --tls-cert "$W/cert.pem" \
  --tls-key "$W/key.pem" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
KV=$!
for _ in $(seq 1 50); do grep -q ready "$W/kv.out" 2>/dev/null && grep -q ready "$W/sim.out" 2>/dev/null && break; sleep 0.1; done
SIMPORT=$(sed -E 's/.*"port":([0-9]+).*/\1/' "$W/sim.out" | head -1)
API=$(sed -E 's/.*"api":"([^"]+)".*/\1/' "$W/kv.out")
KVPORT=$(freeport); NGPORT=$(freeport)
curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$KVPORT,\"protocol\":\"tcp\",\"mode\":4,\"sse_mode\":true,\"security\":1},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$SIMPORT,\"weight\":1}]}" >/dev/null
mkdir -p "$W/ng"
cat >"$W/ng/nginx.conf" <<NGXC
worker_processes 1; pid $W/ng/nginx.pid; error_log $W/ng/error.log warn; daemon off;
events { worker_connections 20000; }
http { access_log off;
  upstream up { server 127.0.0.1:$SIMPORT; keepalive 256; }
  $(nginx_tls_relay_server "$NGPORT" "$W/cert.pem" "$W/key.pem") }
NGXC
nginx -p "$W/ng" -c "$W/ng/nginx.conf" & pids+=($!)
NG=$!
sleep 0.5
ticks() { local t=0 p; for p in $1 $(pgrep -P "$1" || true); do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo $t; }
echo "| round | server | handshakes | server CPU us per handshake | system calls per handshake |"
echo "|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  for arm in kvgate nginx; do
    P=$KV; PORT=$KVPORT; [ $arm = nginx ] && { P=$NG; PORT=$NGPORT; }
    perf stat -x, -o "$W/sys.csv" -e 'syscalls:sys_enter_*' -p "$(echo "$P" $(pgrep -P "$P" || true) | tr ' ' ,)" >/dev/null 2>&1 & sp=$!
    sleep 0.5
    c0=$(ticks "$P")
    n=$(openssl s_time -connect "127.0.0.1:$PORT" -new -time "$DURATION" 2>&1 | awk '/connections in/ {print $1; exit}')
    c1=$(ticks "$P")
    kill -INT "$sp" 2>/dev/null || true; wait "$sp" 2>/dev/null || true
    calls=$(awk -F, -v n="$n" '$3 ~ /sys_enter/ && $1 + 0 > 0 && $3 !~ /getpid/ { s += $1 } END { printf "%.1f", s / n }' "$W/sys.csv")
    echo "| $r | $arm | $n | $(( (c1 - c0) * 10000 / (n > 0 ? n : 1) )) | $calls |"
    awk -F, -v n="$n" '$3 ~ /sys_enter/ && $1 + 0 > 0 { sub("syscalls:sys_enter_", "", $3); printf "%s %.2f  ", $3, $1 / n }' "$W/sys.csv" >"$W/kinds-$arm"
  done
done
echo
echo "(system calls exclude getpid, which OpenSSL's random generator makes; by kind, last round:)"
for arm in kvgate nginx; do echo "$arm: $(cat "$W/kinds-$arm")"; done
