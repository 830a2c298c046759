#include "routing/selectors/selector.h"

#include <gtest/gtest.h>

#include <map>

namespace kvgate::routing {
namespace {

std::vector<PoolEndpoint> pool(std::vector<int> weights) {
  std::vector<PoolEndpoint> eps;
  for (size_t i = 0; i < weights.size(); ++i) {
    PoolEndpoint p;
    p.state = std::make_shared<endpoints::EndpointState>("127.0.0." + std::to_string(i + 1), 80);
    p.weight = static_cast<uint8_t>(weights[i]);
    eps.push_back(p);
  }
  return eps;
}

TEST(SmoothWrr, MatchesNginxSequenceForFiveOneOne) {
  // nginx's documented smooth WRR order for weights {5,1,1}: a a b a c a a.
  EXPECT_EQ(smoothWrrSchedule({5, 1, 1}), (std::vector<int>{0, 0, 1, 0, 2, 0, 0}));
  EXPECT_EQ(smoothWrrSchedule({0, 0}), (std::vector<int>{0, 1}));  // all zero: equal shares
  EXPECT_EQ(smoothWrrSchedule({0, 2}), (std::vector<int>{1, 1}));
}

TEST(RoundRobin, CyclesAndSkipsExcluded) {
  auto eps = pool({1, 1, 1});
  auto s = Selector::create(0, eps);
  std::vector<bool> none(3, false);
  EXPECT_EQ(s->pick(eps, none), 0);
  EXPECT_EQ(s->pick(eps, none), 1);
  EXPECT_EQ(s->pick(eps, none), 2);
  EXPECT_EQ(s->pick(eps, none), 0);
  std::vector<bool> ex{false, true, false};
  std::map<int, int> n;
  for (int i = 0; i < 30; ++i) n[s->pick(eps, ex)]++;
  EXPECT_EQ(n[1], 0);
  EXPECT_EQ(n[0] + n[2], 30);
  EXPECT_EQ(s->pick(eps, std::vector<bool>(3, true)), -1);
}

TEST(WeightedRoundRobin, DistributesByWeight) {
  auto eps = pool({3, 1, 0});
  auto s = Selector::create(2, eps);
  std::map<int, int> n;
  std::vector<bool> none(3, false);
  for (int i = 0; i < 400; ++i) n[s->pick(eps, none)]++;
  EXPECT_EQ(n[0], 300);
  EXPECT_EQ(n[1], 100);
  EXPECT_EQ(n[2], 0);  // weight 0 takes no traffic
  EXPECT_EQ(s->pick(eps, {true, true, false}), -1);
}

TEST(LeastConnections, PicksLowestInFlightAndRotatesTies) {
  auto eps = pool({1, 1, 1});
  auto s = Selector::create(4, eps);
  eps[0].state->active = 5;
  eps[1].state->active = 2;
  eps[2].state->active = 7;
  std::vector<bool> none(3, false);
  EXPECT_EQ(s->pick(eps, none), 1);
  EXPECT_EQ(s->pick(eps, {false, true, false}), 0);
  eps[0].state->active = 0;
  eps[1].state->active = 0;
  eps[2].state->active = 0;
  std::map<int, int> n;
  for (int i = 0; i < 30; ++i) n[s->pick(eps, none)]++;
  EXPECT_EQ(n[0], 10);
  EXPECT_EQ(n[1], 10);
  EXPECT_EQ(n[2], 10);
}

TEST(Selector, InactiveSelectorsHaveNoImplementationYet) {
  auto eps = pool({1});
  EXPECT_EQ(Selector::create(8, eps), nullptr);
  EXPECT_NE(Selector::create(0, eps), nullptr);
}

}  // namespace
}  // namespace kvgate::routing
