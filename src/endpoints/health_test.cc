#include "endpoints/health.h"

#include <gtest/gtest.h>

namespace kvgate::endpoints {
namespace {

// An injected manual clock: time moves only when a test advances it.
struct ManualClock : ::testing::Test {
  common::ManualClock clock;
  void advanceMs(int64_t ms) { clock.advance(std::chrono::milliseconds(ms)); }
};
using Breaker = ManualClock;
using Passive = ManualClock;

HealthOptions fast() {
  HealthOptions o;
  o.cb_failures = 5;
  o.origin_5xx = 3;
  o.cb_open = std::chrono::milliseconds(30);
  o.passive_failures = 3;
  o.passive_hold = std::chrono::milliseconds(30);
  return o;
}

TEST_F(Breaker, OpensAfterOriginStreakAndFourXxNeitherAdvancesNorResets) {
  Health h{clock};
  auto o = fast();
  bool trial;
  h.onResponse(o, true, 503, false);
  h.onResponse(o, true, 404, false);  // 4xx: the streak stays at 1
  h.onResponse(o, true, 500, false);
  EXPECT_EQ(h.breaker(), BreakerState::kClosed);
  h.onResponse(o, true, 502, false);  // third consecutive 5xx
  EXPECT_EQ(h.breaker(), BreakerState::kOpen);
  EXPECT_FALSE(h.admits(true, trial));
  EXPECT_TRUE(h.admits(false, trial));  // rules without cb_enable ignore the breaker
}

TEST_F(Breaker, SuccessResetsTheStreak) {
  Health h{clock};
  auto o = fast();
  h.onResponse(o, true, 503, false);
  h.onResponse(o, true, 503, false);
  h.onResponse(o, true, 200, false);
  h.onResponse(o, true, 503, false);
  h.onResponse(o, true, 503, false);
  EXPECT_EQ(h.breaker(), BreakerState::kClosed);
}

TEST_F(Breaker, HalfOpenAdmitsOneTrialThenClosesOrReopens) {
  Health h{clock};
  auto o = fast();
  bool trial = false;
  for (int i = 0; i < 5; ++i) h.onConnectFailure(o, true);  // cb_failures = 5
  EXPECT_EQ(h.breaker(), BreakerState::kOpen);
  advanceMs(29);  // still inside the 30 ms open window
  EXPECT_EQ(h.breaker(), BreakerState::kOpen);
  advanceMs(1);  // the window has passed
  EXPECT_EQ(h.breaker(), BreakerState::kHalfOpen);
  // Passive detection (3 failures, 30 ms hold) has expired too.
  ASSERT_TRUE(h.admits(true, trial));
  EXPECT_TRUE(trial);
  bool second = false;
  EXPECT_FALSE(h.admits(true, second));  // only one trial at a time
  h.onResponse(o, true, 500, true);      // the trial failed: open again
  EXPECT_EQ(h.breaker(), BreakerState::kOpen);
  advanceMs(30);
  ASSERT_TRUE(h.admits(true, trial));
  h.onResponse(o, true, 200, true);  // the trial succeeded: closed
  EXPECT_EQ(h.breaker(), BreakerState::kClosed);
  EXPECT_EQ(h.transitions(BreakerState::kOpen), 2u);
  EXPECT_EQ(h.transitions(BreakerState::kHalfOpen), 2u);
  EXPECT_EQ(h.transitions(BreakerState::kClosed), 1u);
}

TEST_F(Passive, ConsecutiveConnectFailuresMarkDownUntilHoldOrProbe) {
  Health h{clock};
  auto o = fast();
  o.passive_hold = std::chrono::seconds(60);
  h.onConnectFailure(o, false);
  h.onConnectFailure(o, false);
  EXPECT_TRUE(h.up());
  h.onConnectFailure(o, false);  // third: down for the hold
  EXPECT_FALSE(h.up());
  h.setProbeUp(true);  // a passing probe ends it sooner
  EXPECT_TRUE(h.up());
  h.setProbeUp(false);
  EXPECT_FALSE(h.up());
}

TEST_F(Passive, TheHoldEndsOnTime) {
  Health h{clock};
  auto o = fast();
  o.passive_hold = std::chrono::seconds(5);
  for (int i = 0; i < 3; ++i) h.onConnectFailure(o, false);
  EXPECT_FALSE(h.up());
  advanceMs(4999);
  EXPECT_FALSE(h.up());
  advanceMs(1);  // exactly 5 s later
  EXPECT_TRUE(h.up());
}

TEST_F(Breaker, ZeroOriginThresholdDisablesFiveXxDemotion) {
  Health h{clock};
  auto o = fast();
  o.origin_5xx = 0;
  for (int i = 0; i < 10; ++i) h.onResponse(o, true, 503, false);
  EXPECT_EQ(h.breaker(), BreakerState::kClosed);
}

}  // namespace
}  // namespace kvgate::endpoints
