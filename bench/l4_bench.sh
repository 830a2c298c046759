#!/usr/bin/env bash
# The L4 data path (modes 0 and 2, eBPF) side by side in one run, on the namespace topology of
# tests/integration/l4.test.mjs (client -- gateway -- two nginx backends, veth pairs, addresses of
# 198.18.0.0/15), arms alternated ROUNDS times:
#   routed  the client reaches a backend's address through the gateway's kernel forwarding: the
#           floor, no load balancing at all
#   ebpf    kvgate mode 0: VIP 198.19.0.100:8080, round-robin, in eBPF at tc ingress
#   nft     nftables DNAT with netfilter conntrack (VIP 198.19.0.101:8080, numgen round-robin):
#           the kernel's own NAT load balancing (this kernel has no IPVS)
#   ebpf2   kvgate mode 2 (full NAT: the backends see the VIP): VIP 198.19.0.102:8080
#   nft2    nftables full NAT: nft's DNAT plus SNAT to the VIP (198.19.0.103:8080)
#   mode4   kvgate's fullproxy relay (a mode 4 rule on the gateway's address, port 8090, 1 worker)
# Two loads per arm (wrk in the client namespace, 1 thread): keep-alive requests (64 connections:
# packets/s) and a new connection per request (16 connections, Connection: close: connections/s).
# CPU: the whole machine's busy time (/proc/stat) per request, since forwarding runs in softirq
# wherever the packets land. Needs root. Usage: bench/l4_bench.sh [ROUNDS=3] [SECONDS=8]
# (ARMS="ebpf nft" LOADS=conn: a subset; NO_L4=1: kvgate without --l4-ifaces, no ebpf arm)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}; DURATION=${2:-8}
BIN=$(readlink -f "${KVGATE_BIN:-build/kvgate}")
for t in nginx wrk nft ip; do command -v $t >/dev/null || { echo "missing $t: run scripts/setup.sh --bench" >&2; exit 1; }; done
T=$$; C=kvbc$T; G=kvbg$T; B=kvbb$T
W=$(mktemp -d /tmp/kvgate-l4bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  for n in $C $G $B; do ip netns del $n 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
for n in $C $G $B; do ip netns add $n; done
ip link add c0b$T netns $C type veth peer name c1 netns $G
ip link add b0b$T netns $B type veth peer name b1 netns $G
ip -n $C link set c0b$T name c0; ip -n $B link set b0b$T name b0
ip -n $C addr add 198.18.0.2/24 dev c0; ip -n $G addr add 198.18.0.1/24 dev c1
ip -n $G addr add 198.18.1.1/24 dev b1
ip -n $B addr add 198.18.1.2/24 dev b0; ip -n $B addr add 198.18.1.3/24 dev b0
for n in $C $G $B; do ip -n $n link set lo up; done
ip -n $C link set c0 up; ip -n $G link set c1 up; ip -n $G link set b1 up; ip -n $B link set b0 up
ip -n $C route add 198.19.0.0/24 via 198.18.0.1; ip -n $C route add 198.18.1.0/24 via 198.18.0.1
ip -n $B route add default via 198.18.1.1
for k in net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
         net.ipv4.conf.c1.rp_filter=0 net.ipv4.conf.b1.rp_filter=0; do ip netns exec $G sysctl -qw $k; done

BODY='{"id":"chatcmpl-bench","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"2, 3 and 5."}}]}'
mkdir -p "$W/up"
cat >"$W/up/nginx.conf" <<NGX
worker_processes 1; pid $W/up/nginx.pid; error_log $W/up/error.log warn; daemon off;
events { worker_connections 8192; }
http { access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  server { listen 198.18.1.2:8000 backlog=4096; listen 198.18.1.3:8000 backlog=4096;
    listen 198.18.1.2:8001 backlog=4096; listen 198.18.1.3:8001 backlog=4096;
    listen 198.18.1.2:8002 backlog=4096; listen 198.18.1.3:8002 backlog=4096;
    listen 198.18.1.2:8003 backlog=4096; listen 198.18.1.3:8003 backlog=4096;
    listen 198.18.1.2:8004 backlog=4096; listen 198.18.1.3:8004 backlog=4096;
    listen 198.18.1.2:8005 backlog=4096; listen 198.18.1.3:8005 backlog=4096;
    location / { default_type application/json; return 200 '$BODY'; } } }
NGX
ip netns exec $B nginx -p "$W/up" -c "$W/up/nginx.conf" & pids+=($!)
L4FLAG=(--l4-ifaces c1,b1); [ -n "${NO_L4:-}" ] && L4FLAG=()
ip netns exec $G "$BIN" serve "${L4FLAG[@]}" --l4-on-exit detach --workers 1 --api-listen 127.0.0.1:0 --state-dir "$W/kv" >"$W/kv.out" 2>"$W/kv.err" & pids+=($!)
for _ in $(seq 1 50); do grep -q ready "$W/kv.out" 2>/dev/null && break; sleep 0.1; done
API=$(sed -E 's/.*"api":"([^"]+)".*/\1/' "$W/kv.out")
post() { ip netns exec $G curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "$1" >/dev/null; }
# (each arm its own backend port: a new connection of one arm never meets a backend socket in
# TIME_WAIT left by another arm's connection from the same client port)
eps() { echo "[{\"endpointIP\":\"198.18.1.2\",\"targetPort\":$1,\"weight\":1},{\"endpointIP\":\"198.18.1.3\",\"targetPort\":$1,\"weight\":1}]"; }
[ -z "${NO_L4:-}" ] && post "{\"serviceArguments\":{\"externalIP\":\"198.19.0.100\",\"port\":8080,\"protocol\":\"tcp\",\"mode\":0,\"sel\":0},\"endpoints\":$(eps 8001)}"
[ -z "${NO_L4:-}" ] && post "{\"serviceArguments\":{\"externalIP\":\"198.19.0.102\",\"port\":8080,\"protocol\":\"tcp\",\"mode\":2,\"sel\":0},\"endpoints\":$(eps 8004)}"
post "{\"serviceArguments\":{\"externalIP\":\"198.18.0.1\",\"port\":8090,\"protocol\":\"tcp\",\"mode\":4,\"sel\":0},\"endpoints\":$(eps 8003)}"
nft_on() {
  ip netns exec $G nft -f - <<NFT
table ip kvbench {
  chain pre {
    type nat hook prerouting priority -100;
    ip daddr 198.19.0.101 tcp dport 8080 dnat to numgen inc mod 2 map { 0 : 198.18.1.2, 1 : 198.18.1.3 } : 8002
    ip daddr 198.19.0.103 tcp dport 8080 dnat to numgen inc mod 2 map { 0 : 198.18.1.2, 1 : 198.18.1.3 } : 8005
  }
  chain post {
    type nat hook postrouting priority 100;
    ip daddr { 198.18.1.2, 198.18.1.3 } tcp dport 8005 snat to 198.19.0.103
  }
}
NFT
}
nft_off() { ip netns exec $G nft delete table ip kvbench 2>/dev/null || true; }
declare -A URL=([routed]=http://198.18.1.2:8000/ [ebpf]=http://198.19.0.100:8080/ [nft]=http://198.19.0.101:8080/ [mode4]=http://198.18.0.1:8090/
  [ebpf2]=http://198.19.0.102:8080/ [nft2]=http://198.19.0.103:8080/)
ARMS=${ARMS:-routed ebpf nft ebpf2 nft2 mode4}; LOADS=${LOADS:-keepalive conn}
[ -n "${NO_L4:-}" ] && ARMS=$(echo " $ARMS " | sed 's/ ebpf2 / /; s/ ebpf / /')
for arm in routed mode4 $( [[ " $ARMS " == *" ebpf "* ]] && echo ebpf ) $( [[ " $ARMS " == *" ebpf2 "* ]] && echo ebpf2 ); do ip netns exec $C curl -sf --max-time 3 -o /dev/null "${URL[$arm]}" || { echo "arm $arm does not answer" >&2; cat "$W/kv.err" >&2; exit 1; }; done
nft_on; for arm in nft nft2; do ip netns exec $C curl -sf --max-time 3 -o /dev/null "${URL[$arm]}" || { echo "arm $arm does not answer" >&2; exit 1; }; done; nft_off

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
HZ=$(getconf CLK_TCK)
echo "arm,load,round,rps,p50_us,p99_us,machine_cpu_us_per_req" >"$W/results.csv"
run() {  # arm load round
  local arm=$1 load=$2 r=$3 extra=(-c 64) b0 b1
  [ "$load" = conn ] && extra=(-c 16 -H "Connection: close")
  [[ $arm = nft* ]] && nft_on
  b0=$(busy)
  ip netns exec $C wrk -t1 "${extra[@]}" -d"${DURATION}s" --latency "${URL[$arm]}" >"$W/wrk.txt" 2>&1 || true
  b1=$(busy)
  [[ $arm = nft* ]] && nft_off
  /usr/bin/python3 - "$W/wrk.txt" "$arm" "$load" "$r" "$((b1 - b0))" "$HZ" >>"$W/results.csv" <<'PY'
import re, sys
txt = open(sys.argv[1]).read(); arm, load, rnd, ticks, hz = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
m = re.search(r'Requests/sec:\s+([\d.]+)', txt); n = re.search(r'(\d+) requests in', txt)
if not m or not n: sys.exit(f"wrk output for {arm}/{load} round {rnd} unreadable:\n{txt}")
def us(v):
    k = re.match(r'([\d.]+)(us|ms|s)$', v); x = float(k.group(1)); return x * {'us': 1, 'ms': 1e3, 's': 1e6}[k.group(2)]
p50 = us(re.search(r'^\s+50%\s+(\S+)', txt, re.M).group(1)); p99 = us(re.search(r'^\s+99%\s+(\S+)', txt, re.M).group(1))
err = re.search(r'Socket errors: (.*)|Non-2xx or 3xx responses: (\d+)', txt)
if err: print(f"# {arm}/{load} round {rnd}: {err.group(0)}", file=sys.stderr)
print(f"{arm},{load},{rnd},{float(m.group(1)):.0f},{p50:.0f},{p99:.0f},{ticks * 1e6 / hz / int(n.group(1)):.2f}")
PY
}
echo "L4: $ROUNDS rounds x arms ($ARMS) x loads ($LOADS), ${DURATION}s each" >&2
for r in $(seq 1 "$ROUNDS"); do
  for load in $LOADS; do for arm in $ARMS; do run $arm $load $r; done; done
done
column -s, -t "$W/results.csv"
echo "# L4 drops over the run (kvgate_l4_dropped_total, nonzero):"
ip netns exec $G curl -sf "$API/metrics" | grep '^kvgate_l4_dropped_total' | grep -v ' 0$' || echo "# (none)"
cp "$W/results.csv" "${BENCH_OUT:-/tmp/l4_bench_results.csv}"
