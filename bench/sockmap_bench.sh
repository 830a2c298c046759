#!/usr/bin/env bash
# Sockmap relay against the userspace relay on the same rule (issue 33 §2 goal: >= 1.5x the
# throughput of a large-body plaintext service), side by side in one run, arms alternated.
#
# One kvgate (one worker, CPU 0) serves two mode-4 rules in front of the same upstream (nginx,
# one worker, sendfile of a SIZE_MIB file, CPU 1): `sockmap` (sockMapMode response) and
# `userspace` (the same rule without it). CLIENTS curl processes (CPU 1) each fetch the file
# REQS times over one keep-alive connection into /dev/null. Per arm and round: throughput
# (MiB/s over the wall time), the gateway's own CPU and the whole machine's CPU (the kernel's
# relay runs in softirq and work-queue context, charged to no process) per MiB. A third arm,
# `direct`, fetches from nginx with no gateway: the two ends' own cost per MiB, which bounds what
# any relay can gain on a machine they share.
# PIN=0: nothing pinned (the kernel places the gateway, nginx, the clients and its own relay work;
# pinned, the kernel's relay runs with nginx and the clients on CPU 1 while CPU 0 idles).
# Usage: bench/sockmap_bench.sh [ROUNDS=3] [SIZE_MIB=64] [REQS=8] [CLIENTS=4]   (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${1:-3}; SIZE=${2:-64}; REQS=${3:-8}; CLIENTS=${4:-4}
BIN=${KVGATE_BIN:-build/kvgate}
PIN=${PIN:-1}
on() { if [ "$PIN" = 1 ]; then taskset -c "$1" "${@:2}"; else "${@:2}"; fi; }
for t in nginx curl taskset; do command -v $t >/dev/null || { echo "missing $t: run scripts/setup.sh --bench" >&2; exit 1; }; done
W=$(mktemp -d /tmp/kvgate-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
UP=$(freeport); SM=$(freeport); US=$(freeport)
mkdir -p "$W/up/www"
head -c $((SIZE * 1024 * 1024)) /dev/urandom >"$W/up/www/big"
chmod 755 "$W" "$W/up" "$W/up/www"; chmod 644 "$W/up/www/big"  # (nginx's workers run as nobody)
cat >"$W/up/nginx.conf" <<NGX
worker_processes 1; pid $W/up/nginx.pid; error_log $W/up/error.log warn; daemon off;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s; sendfile on;
  server { listen 127.0.0.1:$UP backlog=1024; root $W/up/www; } }
NGX
on 1 nginx -p "$W/up" -c "$W/up/nginx.conf" & pids+=($!)
on 0 "$BIN" serve --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
KVPID=$!
API=$(kvgate_api "$W/kv.out")
for arm in "$SM response" "$US off"; do
  set -- $arm
  curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$1,\"protocol\":\"tcp\",\"mode\":4,\"sel\":0,\"sockMapMode\":\"$2\"},\"endpoints\":[{\"endpointIP\":\"127.0.0.1\",\"targetPort\":$UP,\"weight\":1}]}" >/dev/null
done
sleep 0.5
want=$(sha256sum <"$W/up/www/big" | cut -c1-64)
for p in $SM $US; do  # each arm answers the file whole first
  got=$(curl -s --retry 5 --retry-connrefused "http://127.0.0.1:$p/big" | sha256sum | cut -c1-64 || true)
  [ "$got" = "$want" ] || { echo "port $p: the body differs" >&2; cat "$W/kv.err" >&2; exit 1; }
done
curl -s "$API/metrics" | grep -q '^kvgate_sockmap_available 1' || { echo "the sockmap relay did not load" >&2; cat "$W/kv.err" >&2; exit 1; }

machine_ticks() { awk '/^cpu /{print $2+$3+$4+$6+$7+$8}' /proc/stat; }
run_arm() {  # PORT -> "MiB/s gateway_ms_per_MiB machine_ms_per_MiB"
  local port=$1 urls=() k0 m0 t0 t1 k1 m1
  for _ in $(seq 1 "$REQS"); do urls+=(-o /dev/null "http://127.0.0.1:$port/big"); done
  k0=$(proc_ticks "$BIN serve"); m0=$(machine_ticks); t0=$(date +%s.%N)
  local cp=()
  for _ in $(seq 1 "$CLIENTS"); do on 1 curl -sf "${urls[@]}" & cp+=($!); done
  for p in "${cp[@]}"; do wait "$p"; done
  t1=$(date +%s.%N); k1=$(proc_ticks "$BIN serve"); m1=$(machine_ticks)
  local hz; hz=$(getconf CLK_TCK)
  /usr/bin/python3 -c "
mib=$SIZE*$REQS*$CLIENTS; s=$t1-$t0
print('%.0f %.2f %.2f' % (mib/s, ($k1-$k0)*1000/$hz/mib, ($m1-$m0)*1000/$hz/mib))"
}
echo "sockmap_bench: $SIZE MiB x $REQS requests x $CLIENTS clients per arm, $ROUNDS rounds ($([ "$PIN" = 1 ] && echo 'kvgate CPU 0, nginx + curl CPU 1' || echo 'nothing pinned'))"
echo "# direct: the clients straight to nginx (no gateway): what the two ends cost by themselves"
printf '%-6s %-10s %10s %18s %18s\n' round arm MiB/s 'gw ms/MiB' 'machine ms/MiB'
for r in $(seq 1 "$ROUNDS"); do
  for arm in "sockmap $SM" "userspace $US" "direct $UP"; do
    set -- $arm
    read -r tput gw all < <(run_arm "$2")
    printf '%-6s %-10s %10s %18s %18s\n' "$r" "$1" "$tput" "$gw" "$all"
  done
done
curl -s "$API/metrics" | grep '^kvgate_sockmap_relays_total\|^kvgate_sockmap_bytes_total' | sed 's/^/# /'
