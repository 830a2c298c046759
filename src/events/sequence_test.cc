// SequenceTracker: the batch-numbering rules, case by case (issue 10 §1, engines.md §1.3-1.4).
#include "events/sequence.h"

#include <gtest/gtest.h>

namespace kvgate::events {
namespace {

TEST(Sequence, BaselineThenInOrder) {
  SequenceTracker t;
  auto d = t.onBatch(17, true);  // joining a running publisher: its current number is the baseline
  EXPECT_TRUE(d.apply);
  EXPECT_FALSE(d.clear || d.replay);
  d = t.onBatch(18, true);
  EXPECT_TRUE(d.apply);
  EXPECT_FALSE(d.clear || d.replay);
  EXPECT_EQ(t.last(), 18u);
}

TEST(Sequence, DuplicateIsIgnored) {
  SequenceTracker t;
  t.onBatch(5, true);
  auto d = t.onBatch(5, true);
  EXPECT_FALSE(d.apply || d.clear || d.replay);
}

TEST(Sequence, GapWithReplayAsksForTheMissingBatches) {
  SequenceTracker t;
  t.onBatch(10, true);
  auto d = t.onBatch(14, true);
  EXPECT_TRUE(d.apply);
  EXPECT_TRUE(d.replay);
  EXPECT_FALSE(d.clear);
  EXPECT_EQ(d.replay_from, 11u);
  EXPECT_EQ(d.replay_to, 13u);
  EXPECT_EQ(d.lost, 3u);
  EXPECT_EQ(t.last(), 14u);
}

TEST(Sequence, GapWithoutReplayKeepsUpTo64ThenClears) {
  SequenceTracker t;
  t.onBatch(0, false);
  auto d = t.onBatch(65, false);  // 64 lost
  EXPECT_TRUE(d.apply);
  EXPECT_FALSE(d.clear || d.replay);
  EXPECT_EQ(d.lost, 64u);
  d = t.onBatch(131, false);  // 65 lost
  EXPECT_TRUE(d.apply);
  EXPECT_TRUE(d.clear);
  EXPECT_FALSE(d.replay);
}

TEST(Sequence, GoingBackIsARestart) {
  SequenceTracker t;
  t.onBatch(1000, true);
  auto d = t.onBatch(3, true);  // restarted and already at 3: replay 0..2 after clearing
  EXPECT_TRUE(d.restart && d.clear && d.apply && d.replay);
  EXPECT_EQ(d.replay_from, 0u);
  EXPECT_EQ(d.replay_to, 2u);
  d = t.onBatch(4, true);
  EXPECT_TRUE(d.apply);
  EXPECT_FALSE(d.clear || d.replay || d.restart);
  SequenceTracker u;
  u.onBatch(9, false);
  d = u.onBatch(0, false);  // restarted at 0, no replay socket
  EXPECT_TRUE(d.restart && d.clear && d.apply);
  EXPECT_FALSE(d.replay);
}

TEST(Sequence, ReplayCoverage) {
  EXPECT_TRUE(SequenceTracker::replayCovers(11, 11));
  EXPECT_TRUE(SequenceTracker::replayCovers(11, 3));
  EXPECT_FALSE(SequenceTracker::replayCovers(11, 12));  // the buffer no longer reaches back
}

TEST(Sequence, ResetMakesTheNextBatchABaseline) {
  SequenceTracker t;
  t.onBatch(50, true);
  t.reset();
  auto d = t.onBatch(2, true);
  EXPECT_TRUE(d.apply);
  EXPECT_FALSE(d.clear || d.replay || d.restart);
}

}  // namespace
}  // namespace kvgate::events
