// The candidate filters: each drops exactly what its comment says, a rule's chain holds the
// filters that apply to it, and every drop is counted once, under the first filter that made it.
#include "routing/eligibility/eligibility.h"

#include <gtest/gtest.h>

#include "routing/eligibility/filters.h"
#include "routing/rule_profile.h"

namespace kvgate::routing {
namespace {

constexpr int64_t kSec = 1'000'000'000;

struct Fleet {
  common::ManualClock clock;
  std::vector<PoolEndpoint> eps;
  explicit Fleet(size_t n, std::vector<int> roles = {}) {
    for (size_t i = 0; i < n; ++i) {
      PoolEndpoint p;
      p.state = std::make_shared<endpoints::EndpointState>(
          static_cast<endpoints::EndpointId>(i + 1), "198.18.0." + std::to_string(i + 1), 8000,
          clock);
      p.role = i < roles.size() ? roles[i] : 0;
      eps.push_back(p);
    }
  }
  // The controller said `s` at `at_ns`, speaking every `interval_ns`.
  void controller(size_t i, endpoints::ControllerState s, int64_t at_ns, int64_t interval_ns) {
    eps[i].state->ctl_state.store(static_cast<int>(s));
    eps[i].state->ctl_updated_ns.store(at_ns);
    eps[i].state->ctl_interval_ns.store(interval_ns);
  }
  void openBreaker(size_t i) {
    endpoints::HealthOptions o;  // 5 connect failures open it
    for (int k = 0; k < o.cb_failures; ++k) eps[i].state->health.onConnectFailure(o, true);
  }
};

config::RuleSpec rule(bool cb, bool pd) {
  config::RuleSpec r;
  r.cb_enable = cb;
  r.service_args = nlohmann::json::object();
  if (pd) r.service_args["pd_disagg_mode"] = true;
  return r;
}

std::vector<bool> run(const Eligibility& e, const Fleet& f, EligibilityContext ctx,
                      EligibilityStats* st = nullptr) {
  std::vector<bool> ex(3, true);  // (apply starts from nothing excluded)
  e.apply(f.eps, ctx, ex, st);
  return ex;
}

TEST(Eligibility, ChainsHoldTheFiltersThatApplyToTheRule) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Eligibility(rule(false, false)).names(), (V{"healthy", "controller"}));
  EXPECT_EQ(Eligibility(rule(true, false)).names(), (V{"healthy", "breaker", "controller"}));
  EXPECT_EQ(Eligibility(rule(true, true)).names(),
            (V{"pd_role", "healthy", "breaker", "controller"}));
  // The rule's effective block names the same chain.
  const auto eff = effectiveRouting(rule(false, true), RoutingEnv{});
  EXPECT_EQ(eff["candidateFilters"], (nlohmann::json{"pd_role", "healthy", "controller"}));
}

TEST(Eligibility, NothingDroppedOnAHealthyFleet) {
  Fleet f(4);
  EligibilityStats st;
  std::vector<bool> ex;
  Eligibility(rule(true, true)).apply(f.eps, {0, -1, true}, ex, &st);
  EXPECT_EQ(ex, (std::vector<bool>{false, false, false, false}));
  for (auto& d : st.dropped) EXPECT_EQ(d.load(), 0u);
}

TEST(Eligibility, HealthyDropsProbeDownAndPassivelyHeldEndpoints) {
  Fleet f(3);
  f.eps[0].state->health.setProbeUp(false);
  endpoints::HealthOptions o;  // 3 connect failures hold it down for 5 s
  for (int k = 0; k < o.passive_failures; ++k) f.eps[2].state->health.onConnectFailure(o, false);
  EXPECT_EQ(run(Eligibility(rule(false, false)), f, {}), (std::vector<bool>{true, false, true}));
  f.clock.advance(std::chrono::seconds(6));  // the hold is over
  EXPECT_EQ(run(Eligibility(rule(false, false)), f, {}), (std::vector<bool>{true, false, false}));
}

TEST(Eligibility, BreakerDropsOpenOnlyOnRulesWithCbEnable) {
  Fleet f(3);
  f.openBreaker(1);
  f.eps[1].state->health.setProbeUp(true);  // a passing probe ends the passive hold, not the breaker
  ASSERT_TRUE(f.eps[1].state->health.up());
  ASSERT_EQ(f.eps[1].state->health.breaker(), endpoints::BreakerState::kOpen);
  EXPECT_EQ(run(Eligibility(rule(true, false)), f, {}), (std::vector<bool>{false, true, false}));
  // A rule without cb_enable does not read the breaker.
  EXPECT_EQ(run(Eligibility(rule(false, false)), f, {}), (std::vector<bool>{false, false, false}));
  // HALF_OPEN after the 30 s open window stays a candidate: its trial is taken at the pick.
  f.clock.advance(std::chrono::seconds(31));
  ASSERT_EQ(f.eps[1].state->health.breaker(), endpoints::BreakerState::kHalfOpen);
  EXPECT_EQ(run(Eligibility(rule(true, false)), f, {}), (std::vector<bool>{false, false, false}));
}

TEST(Eligibility, ControllerDropsDisabledAndDrainingUnlessPinned) {
  Fleet f(3);
  f.controller(0, endpoints::ControllerState::kDisabled, 0, 10 * kSec);
  f.controller(1, endpoints::ControllerState::kDraining, 0, 10 * kSec);
  const Eligibility e(rule(false, false));
  EXPECT_EQ(run(e, f, {5 * kSec, -1, true}), (std::vector<bool>{true, true, false}));
  // A request pinned to a stored response may still go to a DRAINING endpoint, never a DISABLED one.
  EXPECT_EQ(run(e, f, {5 * kSec, -1, false}), (std::vector<bool>{true, false, false}));
  // A word older than twice its interval reads ACTIVE (the controller went silent).
  EXPECT_EQ(run(e, f, {21 * kSec, -1, true}), (std::vector<bool>{false, false, false}));
}

TEST(Eligibility, PdRoleKeepsTheLegsRoleOnPdRulesOnly) {
  Fleet f(3, {1, 2, 0});
  const Eligibility pd(rule(false, true));
  EXPECT_EQ(run(pd, f, {0, 1, false}), (std::vector<bool>{false, true, true}));   // prefill
  EXPECT_EQ(run(pd, f, {0, 2, false}), (std::vector<bool>{true, false, true}));   // decode
  EXPECT_EQ(run(pd, f, {0, 0, false}), (std::vector<bool>{true, true, false}));   // rescue
  EXPECT_EQ(run(pd, f, {0, -1, false}), (std::vector<bool>{false, false, false}));
  // Not a P/D rule: roles are not read.
  EXPECT_EQ(run(Eligibility(rule(false, false)), f, {0, 1, false}),
            (std::vector<bool>{false, false, false}));
}

uint64_t dropped(const EligibilityStats& st, std::string_view name) {
  const auto all = candidateFilters();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].name == name) return st.dropped[i].load();
  ADD_FAILURE() << name;
  return 0;
}

TEST(Eligibility, EachDropIsCountedOnceUnderTheFirstFilterThatMadeIt) {
  Fleet f(4, {1, 2, 2, 2});
  f.eps[0].state->health.setProbeUp(false);  // down, but a prefill endpoint: the decode leg's
                                             // pd_role drops it, uncounted
  f.eps[1].state->health.setProbeUp(false);  // down: healthy
  f.controller(1, endpoints::ControllerState::kDisabled, 0, 10 * kSec);  // (healthy came first)
  f.controller(2, endpoints::ControllerState::kDisabled, 0, 10 * kSec);  // controller
  const Eligibility e(rule(true, true));
  EligibilityStats st;
  std::vector<bool> ex;
  for (int k = 0; k < 2; ++k) e.apply(f.eps, {kSec, 2, true}, ex, &st);
  EXPECT_EQ(ex, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(dropped(st, "healthy"), 2u);
  EXPECT_EQ(dropped(st, "breaker"), 0u);
  EXPECT_EQ(dropped(st, "controller"), 2u);
  EXPECT_EQ(dropped(st, "pd_role"), 0u);  // (never counted)
}

TEST(Eligibility, ALaterFilterCountsOnlyWhatItNewlyDrops) {
  // A P/D decode pick: the mask was made with DRAINING kept; the pick drops it then.
  Fleet f(3, {2, 2, 2});
  f.controller(0, endpoints::ControllerState::kDraining, 0, 10 * kSec);
  f.controller(1, endpoints::ControllerState::kDisabled, 0, 10 * kSec);
  const Eligibility e(rule(false, true));
  EligibilityStats st;
  std::vector<bool> ex;
  e.apply(f.eps, {kSec, 2, /*draining=*/false}, ex, &st);
  EXPECT_EQ(ex, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(dropped(st, "controller"), 1u);
  Eligibility::applyLater(eligibility::kController, f.eps, {kSec, 2, true}, ex, &st);
  EXPECT_EQ(ex, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(dropped(st, "controller"), 2u);  // the DISABLED one is not counted twice
}

}  // namespace
}  // namespace kvgate::routing
