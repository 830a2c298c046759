#!/usr/bin/env bash
# User-space instructions per proxied request, counted by callgrind (repeatable whatever else the
# machine does, unlike wall time): kvgate serve --workers 1 under valgrind, a rule with one
# endpoint (nginx returning a fixed JSON), wrk -c8 for 10 s; the worker thread's instructions
# divided by the requests completed. Give several binaries to compare them in one run; the word
# `nginx` adds nginx as a reverse proxy (proxy_pass, upstream keepalive, one process: master off)
# under callgrind the same way: its whole process's instructions, less those of a start and stop
# with no traffic, divided by the requests.
# Usage: bench/proxy_instructions.sh BIN|nginx [BIN|nginx...]
# A BIN may carry serve flags after '@' signs: build/kvgate@--otlp-endpoint@http://127.0.0.1:1
# KEEP=DIR keeps each kvgate run's callgrind output there (cgN.out: callgrind_annotate it).
set -euo pipefail
cd "$(dirname "$0")/.."
for t in nginx wrk valgrind callgrind_annotate; do command -v $t >/dev/null || { echo "missing $t: run scripts/setup.sh --bench and install valgrind" >&2; exit 1; }; done
W=$(mktemp -d /tmp/kvgate-cg.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
freeport() { /usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
UP=$(freeport)
mkdir -p "$W/up"
cat >"$W/up/nginx.conf" <<NGX
worker_processes 1; pid $W/up/nginx.pid; error_log $W/up/error.log warn; daemon off;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  server { listen 127.0.0.1:$UP; location / { default_type application/json; return 200 '{"ok":1}'; } } }
NGX
nginx -p "$W/up" -c "$W/up/nginx.conf" & pids+=($!)
sleep 0.3
echo "| binary | requests | worker instructions | per request |"
echo "|---|---|---|---|"
i=0
ngx_total() {  # $1 = callgrind output: the program's total instructions
  callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1; exit}'
}
ngx_run() {  # $1 = index, $2 = seconds of traffic (0: start and stop only); prints "requests instructions"
  local j=$1 d=$2 port; port=$(freeport); mkdir -p "$W/ng$j"
  cat >"$W/ng$j/nginx.conf" <<NGX
master_process off; worker_processes 1; pid $W/ng$j/nginx.pid; error_log $W/ng$j/error.log warn; daemon off;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  upstream up { server 127.0.0.1:$UP; keepalive 64; keepalive_requests 10000000; }
  server { listen 127.0.0.1:$port;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NGX
  valgrind --tool=callgrind --callgrind-out-file="$W/ng$j.out" nginx -p "$W/ng$j" -c "$W/ng$j/nginx.conf" 2>"$W/ng$j.err" &
  local vp=$! n=0
  for _ in $(seq 1 120); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.5; done
  [ "$d" -gt 0 ] && n=$(wrk -t1 -c8 -d"$d" -s bench/post.lua "http://127.0.0.1:$port/v1/chat/completions" | awk '/requests in/ {print $1}')
  kill -QUIT "$vp"; wait "$vp" 2>/dev/null || true
  echo "$n $(ngx_total "$W/ng$j.out")"
}
for BIN in "$@"; do
  i=$((i + 1)); VIP=$(freeport)
  if [ "$BIN" = nginx ]; then
    read -r _ base < <(ngx_run "${i}idle" 0)
    read -r N INS < <(ngx_run "$i" 10)
    echo "| nginx $(nginx -v 2>&1 | sed 's/.*\///') (proxy) | $N | $((INS - base)) | $(((INS - base) / N)) |"
    continue
  fi
  IFS='@' read -r -a PARTS <<<"$BIN"
  valgrind --tool=callgrind --callgrind-out-file="$W/cg$i.out" "${PARTS[0]}" serve --workers 1 \
    --api-listen 127.0.0.1:0 --state-dir "$W/st$i" "${PARTS[@]:1}" >"$W/out$i" 2>"$W/err$i" &
  vp=$!
  for _ in $(seq 1 120); do grep -q ready "$W/out$i" 2>/dev/null && break; sleep 0.5; done
  API=$(sed -E 's/.*"api":"([^"]+)".*/\1/' "$W/out$i")
  curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$VIP,\"protocol\":\"tcp\",\"sel\":0,\"mode\":4},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$UP,\"weight\":1}]}" >/dev/null
  N=$(wrk -t1 -c8 -d10 -s bench/post.lua "http://127.0.0.1:$VIP/v1/chat/completions" | awk '/requests in/ {print $1}')
  kill -TERM "$vp"; wait "$vp" 2>/dev/null || true
  INS=$(callgrind_annotate --inclusive=yes "$W/cg$i.out" 2>/dev/null |
    awk '/DataPlane::start\(\)::\{lambda\(\)#[0-9]+\}> > >::_M_run/ && !done {gsub(",","",$1); print $1; done=1}')
  echo "| $BIN | $N | $INS | $((INS / N)) |"
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP"; cp "$W/cg$i.out" "$KEEP/cg$i.out"; fi
done
