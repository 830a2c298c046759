#!/usr/bin/env bash
# Faults between the gateway and its engines (issue 28 §2; docs/reliability.md "Faults").
#
# The engines (two `kvgate sim` processes, one worker each) run in a network namespace of their
# own behind a veth pair (host 198.18.2.1 <-> namespace 198.18.2.2, the benchmarking range); the
# gateway and the clients (`kvgate bench sse`: streamed completions of EVENTS events, 20 ms apart)
# stay in the root namespace. One scenario per run:
#   none        the control: no fault
#   loss        1 % of packets dropped each way, in the namespace (nftables numgen random: real
#               packet loss; this kernel has no sch_netem, so no tc netem)
#   delay       50 ms added each way (RTT +100 ms) by `kvgate bench relay` in front of each engine
#               (application-level delay: the relay forwards bytes, it cannot delay packets)
#   reset       0.1 % of the packets reaching the engines answered with a TCP reset (nftables)
#   kill        one engine SIGKILLed 4 s into the run, then a second wave of streams
#   disconnect  every client closes its stream after 5 events (clients leaving by the thousand)
#   flood       a KV publisher (`kvgate bench kvflood`) floods 1M events/s at the gateway's event
#               plane for 20 s, restarting (sequence from 0) at 10 s, while the streams run
#   memcap      the gateway in a memory cgroup (v1 or v2) of CGROUP_MB (64) with the default bound
#               (70 % of it), STREAMS streams held open; GUARD=0 runs it with --max-heap-bytes 0
# For each: what the clients saw (bench JSON), what the gateway holds after (RSS, descriptors,
# open connections, in-flight), the engines' running requests after, and the fault's counters.
# Needs root (namespaces, nftables, cgroups); removes everything it made on exit.
#   usage: bench/faults.sh SCENARIO [STREAMS=1000] [OUT=build/faults]
set -euo pipefail
cd "$(dirname "$0")/.."
SCENARIO=${1:?usage: bench/faults.sh none|loss|delay|reset|kill|disconnect|flood|memcap [STREAMS] [OUT]}
STREAMS=${2:-1000}
OUT=${3:-build/faults}
EVENTS=${EVENTS:-100}
BIN=$(readlink -f "${KVGATE_BIN:-build/kvgate}")
NS=kvgf$$
VA=kvgfa$$
VB=kvgfb$$
HOST_IP=198.18.2.1
NS_IP=198.18.2.2
CG=""
mkdir -p "$OUT"
W=$(mktemp -d /tmp/kvgate-faults.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip link del "$VA" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  if [ -n "$CG" ]; then rmdir "$CG" 2>/dev/null || true; fi
  rm -rf "$W"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

ip netns add "$NS"
ip link add "$VA" type veth peer name "$VB"
ip link set "$VB" netns "$NS"
ip addr add "$HOST_IP/30" dev "$VA"
ip link set "$VA" up
ip netns exec "$NS" ip addr add "$NS_IP/30" dev "$VB"
ip netns exec "$NS" ip link set "$VB" up
ip netns exec "$NS" ip link set lo up

waitline() {  # file pattern
  for _ in $(seq 1 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "timed out waiting for $2 in $1" >&2; cat "$1" >&2; exit 1
}

# Two engines, one worker each (so one can be killed alone).
SIMARGS=(--workers 1 --host "$NS_IP" --port 0 --timing fixed --stamp-events --itl-ms 20
  --prefill-base-ms 0 --prefill-us-per-token 0 --max-concurrency 100000)
simports=()
simpids=()
for i in 0 1; do
  ip netns exec "$NS" "$BIN" sim "${SIMARGS[@]}" >"$W/sim$i.out" 2>"$W/sim$i.err" &
  pids+=($!); simpids+=($!)
  waitline "$W/sim$i.out" ready
  simports+=("$(sed -E 's/.*"port":([0-9]+).*/\1/' "$W/sim$i.out" | head -1)")
done
targets=("$NS_IP:${simports[0]}" "$NS_IP:${simports[1]}")

case "$SCENARIO" in
  loss)
    ip netns exec "$NS" nft -f - <<EOF
table inet kvgf {
  chain in { type filter hook input priority 0; iifname "$VB" numgen random mod 100 < 1 counter drop; }
  chain out { type filter hook output priority 0; oifname "$VB" numgen random mod 100 < 1 counter drop; }
}
EOF
    ;;
  reset)
    ip netns exec "$NS" nft -f - <<EOF
table inet kvgf {
  chain in { type filter hook input priority 0; iifname "$VB" tcp flags & ack == ack numgen random mod 1000 < 1 counter reject with tcp reset; }
}
EOF
    ;;
  delay)
    for i in 0 1; do
      rp=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
      "$BIN" bench relay --listen "127.0.0.1:$rp" --upstream "${targets[$i]}" --delay-us 50000 \
        >"$W/relay$i.out" 2>&1 &
      pids+=($!)
      targets[$i]="127.0.0.1:$rp"
    done
    sleep 0.5
    ;;
esac

# The gateway (memcap: inside a memory cgroup made for it).
GWARGS=(serve --api-listen 127.0.0.1:0 --state-dir "$W/state")
if [ "$SCENARIO" = memcap ]; then
  MB=${CGROUP_MB:-64}
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    CG=/sys/fs/cgroup/kvgf$$; mkdir "$CG"; echo $((MB << 20)) >"$CG/memory.max"
    echo 0 >"$CG/memory.swap.max" 2>/dev/null || true
  else
    CG=/sys/fs/cgroup/memory/kvgf$$; mkdir "$CG"; echo $((MB << 20)) >"$CG/memory.limit_in_bytes"
    echo $((MB << 20)) >"$CG/memory.memsw.limit_in_bytes" 2>/dev/null || true
  fi
  [ "${GUARD:-1}" = 0 ] && GWARGS+=(--max-heap-bytes 0)
  sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG" "$BIN" "${GWARGS[@]}" >"$W/gw.out" 2>"$W/gw.err" &
else
  "$BIN" "${GWARGS[@]}" >"$W/gw.out" 2>"$W/gw.err" &
fi
GW=$!
pids+=($GW)
waitline "$W/gw.out" ready
API=$(sed -E 's/.*"api":"([^"]+)".*/\1/' "$W/gw.out")
VIP=$(/usr/bin/python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
eps=""
for t in "${targets[@]}"; do
  [ "$SCENARIO" = flood ] && [ -n "$eps" ] && break  # flood: one engine, whose publisher floods
  eps+="${eps:+,}{\"endpointIP\":\"${t%:*}\",\"targetPort\":${t##*:},\"weight\":1}"
done
extra=""
if [ "$SCENARIO" = flood ]; then
  KVPORT=5557
  extra=",\"kvExactMode\":3,\"kvZmqPort\":$KVPORT,\"kvBlockSize\":16"
fi
curl -sf -X POST "$API/netlox/v1/config/loadbalancer" -d "{\"serviceArguments\":{\"externalIP\":\"127.0.0.1\",\"port\":$VIP,\"protocol\":\"tcp\",\"mode\":4,\"sse_mode\":true$extra},\"endpoints\":[$eps]}" >/dev/null

gwstate() {  # label: RSS, descriptors, open client connections, in-flight upstream requests
  local m; m=$(curl -sf "$API/metrics" || true)
  local conns; conns=$(awk '$1=="kvgate_active_client_connections"{print $2}' <<<"$m")
  local idle; idle=$(awk '$1=="kvgate_upstream_idle_connections"{print $2}' <<<"$m")
  local infl; infl=$(awk '/^kvgate_endpoint_inflight/{s+=$2} END{print s+0}' <<<"$m")
  echo "{\"at\":\"$1\",\"rss_kib\":$(awk '/VmRSS/{print $2}' /proc/$GW/status),\"fds\":$(ls /proc/$GW/fd | wc -l),\"client_connections\":${conns:-0},\"idle_upstream\":${idle:-0},\"endpoint_inflight\":$infl}"
}
simrunning() {  # the engines' running and aborted requests (the dead one's: "gone")
  local out="" i
  for i in 0 1; do
    local m run ab
    m=$(ip netns exec "$NS" curl -s --max-time 2 "http://$NS_IP:${simports[$i]}/metrics" 2>/dev/null || true)
    run=$(awk '/^vllm:num_requests_running/{print $2}' <<<"$m" | head -1 || true)
    ab=$(awk '/^kvgate_sim_requests_aborted_total/{s+=$2; n++} END{if (n) print s}' <<<"$m" || true)
    out+="${out:+,}\"sim$i\":{\"running\":\"${run:-gone}\",\"aborted\":\"${ab:-gone}\"}"
  done
  echo "{$out}"
}

sleep 0.5
# disconnect: streams of 20 s, so that nothing running 3 s after the clients left shows aborts.
[ "$SCENARIO" = disconnect ] && EVENTS=1000
gwstate before >"$OUT/$SCENARIO.state"
BENCH=(bench sse --target "127.0.0.1:$VIP" --streams "$STREAMS" --events "$EVENTS" --ramp-ms 8000)
[ "$SCENARIO" = disconnect ] && BENCH+=(--abort-after 5)
case "$SCENARIO" in
  kill)
    "$BIN" "${BENCH[@]}" >"$W/bench.json" 2>"$W/bench.err" &
    B=$!
    sleep 4
    kill -9 "${simpids[0]}"
    wait "$B" || true
    gwstate "after first wave" >>"$OUT/$SCENARIO.state"
    # A second wave: every stream must find the engine left.
    "$BIN" bench sse --target "127.0.0.1:$VIP" --streams 200 --events "$EVENTS" --ramp-ms 2000 \
      >"$W/bench2.json" 2>"$W/bench2.err" || true
    ;;
  flood)
    ip netns exec "$NS" "$BIN" bench kvflood --bind "tcp://$NS_IP:$KVPORT" --rate 1000000 \
      --seconds 20 --restart-at 10 >"$W/flood.json" 2>"$W/flood.err" &
    F=$!
    pids+=($F)
    sleep 2
    "$BIN" "${BENCH[@]}" >"$W/bench.json" 2>"$W/bench.err" || true
    wait "$F" || true
    ;;
  memcap)
    "$BIN" bench sse --target "127.0.0.1:$VIP" --streams "$STREAMS" --events 500 --ramp-ms 20000 \
      >"$W/bench.json" 2>"$W/bench.err" &
    B=$!
    peak=0
    while kill -0 "$B" 2>/dev/null; do
      kill -0 "$GW" 2>/dev/null || break
      r=$(awk '/VmRSS/{print $2}' /proc/$GW/status 2>/dev/null || echo 0)
      [ "${r:-0}" -gt "$peak" ] && peak=$r
      sleep 0.5
    done
    wait "$B" || true
    echo "{\"peak_rss_kib\":$peak}" >>"$OUT/$SCENARIO.state"
    ;;
  *)
    "$BIN" "${BENCH[@]}" >"$W/bench.json" 2>"$W/bench.err" || true
    ;;
esac
sleep 3
if kill -0 "$GW" 2>/dev/null; then
  gwstate after >>"$OUT/$SCENARIO.state"
else
  echo "{\"at\":\"after\",\"gateway\":\"exited\",\"status\":\"$(wait $GW; echo $?)\"}" >>"$OUT/$SCENARIO.state"
fi
simrunning >>"$OUT/$SCENARIO.state"
{
  echo "== $SCENARIO: $STREAMS streams of $([ "$SCENARIO" = memcap ] && echo 500 || echo "$EVENTS") events"
  cat "$W/bench.json"
  [ -f "$W/bench2.json" ] && { echo "second wave:"; cat "$W/bench2.json"; }
  [ -f "$W/flood.json" ] && { echo "publisher:"; tail -1 "$W/flood.json"; }
  cat "$OUT/$SCENARIO.state"
  case "$SCENARIO" in
    loss|reset) echo "nft:"; ip netns exec "$NS" nft list ruleset | grep -o 'counter packets [0-9]* bytes [0-9]*' ;;
  esac
  curl -sf "$API/metrics" 2>/dev/null | grep -E '^(kvgate_kv_(batches|lost_batches|restarts|clears|blocks|evicted_blocks|rejected|skipped)_total|kvgate_relay_cuts_total|kvgate_upstream_socket_failures_total|kvgate_kv_blocks|kvgate_kv_index_bytes|kvgate_overload_(state|shed_total)|kvgate_heap_(bytes|limit_bytes)|kvgate_endpoint_connect_failures_total|kvgate_breaker_state|kvgate_requests_total)' | head -40 || true
  if [ -n "$CG" ]; then
    echo "cgroup:"
    if [ -f "$CG/memory.events" ]; then
      echo "peak $(cat "$CG/memory.peak" 2>/dev/null)"; cat "$CG/memory.events"
    else
      echo "max_usage_in_bytes $(cat "$CG/memory.max_usage_in_bytes")"
      echo "failcnt $(cat "$CG/memory.failcnt") memsw.failcnt $(cat "$CG/memory.memsw.failcnt" 2>/dev/null)"
      grep oom_kill "$CG/memory.oom_control"
    fi
  fi
  grep -cE ' (WARN|ERROR) ' "$W/gw.err" | sed 's/^/gateway warnings+errors: /'
  grep -E ' (WARN|ERROR) ' "$W/gw.err" | sed -E 's/^[^ ]+ //' | cut -c1-160 | sort | uniq -c | sort -rn | head -8
} | tee "$OUT/$SCENARIO.txt"
