#!/usr/bin/env bash
# Shared quota store (Redis) admissions/s at an added round trip, issue 28 §1.4. Redis runs in a
# network namespace of its own behind a veth pair (198.18.0.1 <-> 198.18.0.2, the benchmarking
# range), and the gateway side (kvgate bench quota) in the root namespace. This kernel has no
# sch_netem (tc netem: "Specified qdisc kind is unknown"), so the delay is added by
# `kvgate bench relay` inside the namespace: +DELAY_US each way. The bench prints the RTT it
# measured with PING next to each figure. Needs root; removes everything it made on exit.
#   usage: bench/quota_rtt.sh [DELAY_US=100] [SECONDS=5]
set -euo pipefail
DELAY_US=${1:-100}
SECONDS_EACH=${2:-5}
KVGATE=${KVGATE:-build/kvgate}
NS=kvgq$$
VA=kvgqa$$
VB=kvgqb$$
cleanup() {
  [[ -n "${RELAY_PID:-}" ]] && kill "$RELAY_PID" 2>/dev/null || true
  [[ -n "${REDIS_PID:-}" ]] && kill "$REDIS_PID" 2>/dev/null || true
  wait 2>/dev/null || true
  ip link del "$VA" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$NS"
ip link add "$VA" type veth peer name "$VB"
ip link set "$VB" netns "$NS"
ip addr add 198.18.0.1/30 dev "$VA"
ip link set "$VA" up
ip netns exec "$NS" ip addr add 198.18.0.2/30 dev "$VB"
ip netns exec "$NS" ip link set "$VB" up
ip netns exec "$NS" ip link set lo up
ip netns exec "$NS" redis-server --port 6379 --bind 198.18.0.2 127.0.0.1 --save "" \
  --appendonly no --protected-mode no >/dev/null &
REDIS_PID=$!
ip netns exec "$NS" "$KVGATE" bench relay --listen 198.18.0.2:6380 --upstream 127.0.0.1:6379 \
  --delay-us "$DELAY_US" >/dev/null &
RELAY_PID=$!
for _ in $(seq 100); do
  redis-cli -h 198.18.0.2 -p 6380 PING >/dev/null 2>&1 && break
  sleep 0.1
done
echo "# Redis across the veth, no added delay"
"$KVGATE" bench quota --redis 198.18.0.2:6379 --seconds "$SECONDS_EACH" --pipeline 1,128 2>/dev/null
echo "# Redis across the veth, +${DELAY_US} us each way (relay)"
"$KVGATE" bench quota --redis 198.18.0.2:6380 --seconds "$SECONDS_EACH" --pipeline 1,16,128 2>/dev/null
