// DecisionFeed (the dashboard's feed of routing decisions): bounded, ordered, a cursor per
// viewer, and a worker that never waits (a record meeting the lock held is dropped and counted).
#include "proxy/decision_feed.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

namespace kvgate::proxy {
namespace {

DecisionRecord rec(int i) {
  DecisionRecord r;
  r.request_id = "r" + std::to_string(i);
  r.status = 200;
  return r;
}

TEST(DecisionFeed, KeepsTheNewestInOrderAndEachViewerReadsEachOnce) {
  DecisionFeed f;
  EXPECT_FALSE(f.active());
  f.addViewer();
  EXPECT_TRUE(f.active());
  for (int i = 1; i <= 300; ++i) f.push(rec(i));
  uint64_t cursor = 0;
  auto got = f.since(cursor);
  ASSERT_EQ(got.size(), DecisionFeed::kCapacity);  // 256 kept: records 45..300
  EXPECT_EQ(got.front().request_id, "r45");
  EXPECT_EQ(got.back().request_id, "r300");
  for (size_t i = 1; i < got.size(); ++i) EXPECT_EQ(got[i].seq, got[i - 1].seq + 1);
  EXPECT_EQ(cursor, 300u);
  EXPECT_TRUE(f.since(cursor).empty());
  f.push(rec(301));
  got = f.since(cursor);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].request_id, "r301");
  // A second viewer from the newest: only what comes after.
  uint64_t other = f.newest();
  f.push(rec(302));
  ASSERT_EQ(f.since(other).size(), 1u);
  f.removeViewer();
  EXPECT_FALSE(f.active());
  EXPECT_EQ(DecisionFeed::cut(std::string(1000, 'm')).size(), DecisionFeed::kMaxField);
}

TEST(DecisionFeed, AWorkerNeverWaitsAndEveryRecordIsKeptOrCounted) {
  DecisionFeed f;
  std::atomic<bool> stop{false};
  uint64_t cursor = 0;
  size_t read = 0;
  std::thread reader([&] {
    while (!stop.load()) read += f.since(cursor).size();
  });
  constexpr int kPushes = 200000;
  for (int i = 0; i < kPushes; ++i) f.push(rec(i));
  stop.store(true);
  reader.join();
  // Every push either took a sequence number or was counted as dropped.
  EXPECT_EQ(f.newest() + f.dropped(), static_cast<uint64_t>(kPushes));
  EXPECT_LE(read, f.newest());
}

}  // namespace
}  // namespace kvgate::proxy
