#!/usr/bin/env bash
# LookupRoute over real gRPC: `kvgate index` loaded with BLOCKS blocks over 16 replicas (chains of
# 512), then closed-loop runs at several concurrencies, open-loop runs at fixed rates and the
# transport's ceiling (1-block lookups); memory per indexed block from the index's own gauge and
# its RSS. Prints Markdown.
#   bash bench/lookup_bench.sh [BLOCKS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BLOCKS=${1:-1000000}
SECS=${2:-8}
BIN=${KVGATE_BIN:-build/kvgate}
OUT=$(mktemp)
"$BIN" index --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 >"$OUT" 2>/dev/null &
PID=$!
trap 'kill $PID 2>/dev/null; rm -f "$OUT"' EXIT
for _ in $(seq 50); do grep -q ready "$OUT" && break; sleep 0.1; done
GRPC=$(sed -n 's/.*"grpc":"\([^"]*\)".*/\1/p' "$OUT")
METRICS=$(sed -n 's/.*"metrics":"\([^"]*\)".*/\1/p' "$OUT")
RSS0=$(ps -o rss= -p $PID)
echo "| run | calls/s | p50 us | p90 us | p99 us | p99.9 us | ingest blocks/s |"
echo "|---|---|---|---|---|---|---|"
row() {
  /usr/bin/python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print('| %s | %d | %d | %d | %d | %d | %s |' % (sys.argv[1], r['calls_per_s'], r['p50_us'], r['p90_us'], r['p99_us'], r['p999_us'], ('%d' % r['ingest_blocks_per_s']) if r['ingest_blocks_per_s'] else '-'))" "$1"
}
"$BIN" bench lookup --target "$GRPC" --blocks "$BLOCKS" --duration-s "$SECS" --concurrency 8 | row "preload + closed loop, 8 in flight"
RSS1=$(ps -o rss= -p $PID)
for c in 32 128; do
  "$BIN" bench lookup --target "$GRPC" --blocks "$BLOCKS" --no-preload --duration-s "$SECS" --concurrency $c | row "closed loop, $c in flight"
done
for r in 1000 2000 4000 6000 8000; do
  "$BIN" bench lookup --target "$GRPC" --blocks "$BLOCKS" --no-preload --duration-s "$SECS" --concurrency 256 --rate $r | row "open loop at $r/s"
done
# The transport's ceiling on this machine: 1-block lookups (random chains: a miss, AFFINITY_HINT),
# so the lookup itself costs nearly nothing and what is left is gRPC, client and server.
"$BIN" bench lookup --target "$GRPC" --no-preload --chain 1 --duration-s "$SECS" --concurrency 64 | row "gRPC ceiling: 1-block lookups, closed loop, 64 in flight"
M=$(curl -s "$METRICS/metrics")
HOLD=$(echo "$M" | awk '/^kvgate_index_holdings /{print $2}')
BYTES=$(echo "$M" | awk '/^kvgate_index_memory_bytes /{print $2}')
echo
/usr/bin/python3 -c "import sys; h,b,r0,r1=map(float,sys.argv[1:]); print('Index: %d (block, replica) entries; tables %.1f bytes per entry (kvgate_index_memory_bytes); process RSS grew %.1f bytes per entry while loading.' % (h, b/h, (r1-r0)*1024/h))" "$HOLD" "$BYTES" "$RSS0" "$RSS1"
