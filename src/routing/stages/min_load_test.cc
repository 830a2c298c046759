// min_load (Tier 2): the lowest active + queued wins; round-robin only among genuine ties.
#include <gtest/gtest.h>

#include "routing/stages/pd_ladder.h"

namespace kvgate::routing {
namespace {

common::ManualClock g_clock;

struct Fixture {
  std::vector<PoolEndpoint> eps;
  std::vector<bool> excluded;
  config::RuleSpec rule;
  std::unique_ptr<Stage> stage;
  explicit Fixture(size_t n) : excluded(n, false) {
    for (size_t i = 0; i < n; ++i) {
      PoolEndpoint p;
      p.state = std::make_shared<endpoints::EndpointState>(
          static_cast<endpoints::EndpointId>(i + 1), "10.0.0." + std::to_string(i + 1), 80,
          g_clock);
      eps.push_back(p);
    }
    StageServices s{g_clock, rule, eps};
    stage = makeMinLoad(s);
  }
  void load(size_t i, int64_t active, int64_t queued = 0) {
    eps[i].state->active = active;
    eps[i].state->queued = queued;
  }
  StageResult pick() {
    CandidateSet c{eps, excluded};
    return stage->evaluate(RequestContext{}, c);
  }
};

TEST(MinLoad, LowestActivePlusQueuedWinsWithoutTouchingTheCursor) {
  Fixture f(3);
  f.load(0, 2, 0);  // score 2
  f.load(1, 0, 3);  // score 3: fewer in flight, but three parked
  f.load(2, 1, 0);  // score 1
  for (int i = 0; i < 4; ++i) {
    auto r = f.pick();
    EXPECT_EQ(r.index, 2);
    EXPECT_EQ(r.key, DecisionKey::kLoad);
  }
  // The cursor never moved: the first tie afterwards goes to the first tied endpoint.
  f.load(0, 1);
  auto r = f.pick();
  EXPECT_EQ(r.index, 0);
  EXPECT_EQ(r.key, DecisionKey::kRr);
}

TEST(MinLoad, GenuineTiesRotateInPoolOrder) {
  Fixture f(4);
  f.load(1, 5);  // 0, 2 and 3 tie at 0
  std::vector<int> got;
  for (int i = 0; i < 6; ++i) got.push_back(f.pick().index);
  EXPECT_EQ(got, (std::vector<int>{0, 2, 3, 0, 2, 3}));
}

TEST(MinLoad, HonoursExclusionsAndFallsWhenNoneIsLeft) {
  Fixture f(2);
  f.load(0, 0);
  f.load(1, 9);
  f.excluded[0] = true;  // the least loaded is masked (down, breaker open, wrong role)
  EXPECT_EQ(f.pick().index, 1);
  f.excluded[1] = true;
  auto r = f.pick();
  EXPECT_EQ(r.index, -1);
  EXPECT_EQ(r.reason, FallReason::kAllExcluded);
}

}  // namespace
}  // namespace kvgate::routing
