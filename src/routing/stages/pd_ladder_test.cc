// Tier 0 (session) and Tier 1 (prefix_trie) of the P/D ladder on plain data, a manual clock and
// hand-worked expectations (seed 000's fall-through conditions).
#include "routing/stages/pd_ladder.h"

#include <gtest/gtest.h>

#include "routing/stages/prefix_trie.h"
#include "routing/stages/session_table.h"

namespace kvgate::routing {
namespace {

constexpr int64_t kSec = 1'000'000'000;

struct Pool {
  common::ManualClock clock;
  std::vector<PoolEndpoint> eps;
  std::vector<bool> excluded;
  config::RuleSpec rule;
  SessionTable sessions{64};
  PrefixTrie trie{1024};
  // roles: endpoints in order; prefill ones are candidates, the others masked (as pd_forward does)
  explicit Pool(std::vector<int> roles) {
    for (size_t i = 0; i < roles.size(); ++i) {
      PoolEndpoint p;
      p.state = std::make_shared<endpoints::EndpointState>(
          static_cast<endpoints::EndpointId>(i + 1), "10.0.0." + std::to_string(i + 1), 80, clock);
      p.role = roles[i];
      eps.push_back(p);
      excluded.push_back(roles[i] != 1);
    }
    rule.cb_enable = true;
  }
  StageServices services() {
    StageServices s{clock, rule, eps};
    s.sessions = &sessions;
    s.trie = &trie;
    return s;
  }
};

TEST(SessionTable, PinsExpireAfterTheirTtlAndTheLeastRecentlyPinnedGoFirst) {
  SessionTable t(16);  // one entry per shard
  t.pin(1, {1, 2}, 0);
  ASSERT_TRUE(t.lookup(1, 10 * kSec, 10 * kSec));
  EXPECT_EQ(t.lookup(1, 10 * kSec, 10 * kSec)->decode, 2u);
  EXPECT_FALSE(t.lookup(1, 10 * kSec + 1, 10 * kSec));  // past its TTL: gone
  EXPECT_EQ(t.size(), 0u);
  // Keys 5 and 6 land in the same shard (top bits 0): the second push drops the first.
  t.pin(5, {1, 2}, 0);
  t.pin(6, {3, 4}, 0);
  EXPECT_FALSE(t.lookup(5, 0, kSec));
  EXPECT_TRUE(t.lookup(6, 0, kSec));
}

TEST(Session, APinPicksItsPrefillAndHandsOverItsDecode) {
  Pool p({1, 1, 2});  // prefill 0, 1; decode 2
  p.rule.service_args = {{"pd_session_ttl_sec", 60}};
  auto stage = makeSession(p.services());
  RequestContext ctx;
  CandidateSet c{p.eps, p.excluded};
  EXPECT_EQ(stage->evaluate(ctx, c).reason, FallReason::kNoKey);  // no conversation key
  ctx.conversation_key = 42;
  EXPECT_EQ(stage->evaluate(ctx, c).reason, FallReason::kUnpinned);
  p.sessions.pin(42, {2, 3}, p.clock.nowNs());  // ids: prefill 1 (id 2), decode 2 (id 3)
  auto r = stage->evaluate(ctx, c);
  EXPECT_EQ(r.index, 1);
  EXPECT_EQ(r.peer, 2);
  EXPECT_EQ(r.key, DecisionKey::kConversation);
  // 60 s later (the rule's TTL) it still holds; a moment after, it is gone.
  p.clock.advance(std::chrono::seconds(60));
  EXPECT_EQ(stage->evaluate(ctx, c).index, 1);
  p.clock.advance(std::chrono::nanoseconds(1));
  EXPECT_EQ(stage->evaluate(ctx, c).reason, FallReason::kUnpinned);
}

TEST(Session, AnUnusablePinIsEvictedAndTheLadderContinues) {
  Pool p({1, 1, 2});
  auto stage = makeSession(p.services());
  RequestContext ctx;
  ctx.conversation_key = 7;
  CandidateSet c{p.eps, p.excluded};
  // The pinned prefill endpoint is masked (down, breaker open, failed for this request).
  p.sessions.pin(7, {1, 3}, p.clock.nowNs());
  p.excluded[0] = true;
  EXPECT_EQ(stage->evaluate(ctx, c).reason, FallReason::kPinEvicted);
  EXPECT_EQ(stage->evaluate(ctx, c).reason, FallReason::kUnpinned);  // evicted
  p.excluded[0] = false;
  // The pinned decode endpoint's breaker is open.
  p.sessions.pin(7, {1, 3}, p.clock.nowNs());
  endpoints::HealthOptions o;
  o.cb_failures = 3;  // P/D rules' breaker (seed 000)
  for (int i = 0; i < 3; ++i) p.eps[2].state->health.onConnectFailure(o, true);
  ASSERT_EQ(p.eps[2].state->health.breaker(), endpoints::BreakerState::kOpen);
  EXPECT_EQ(stage->evaluate(ctx, c).reason, FallReason::kPinEvicted);
  // A pin naming an endpoint that left the rule (id 9).
  p.sessions.pin(7, {9, 3}, p.clock.nowNs());
  EXPECT_EQ(stage->evaluate(ctx, c).reason, FallReason::kPinEvicted);
}

TEST(PrefixTrie, ChainCutsTheRenderedPromptInChunks) {
  std::vector<TrieNode> a, b, l;
  trieChain("m", "", std::string(5000, 'x'), l);  // 8 x 256 up to 2048, then 1024, 1024, 904
  ASSERT_EQ(l.size(), 11u);
  EXPECT_EQ(l[7].end, 2048u);
  EXPECT_EQ(l[8].end, 3072u);
  EXPECT_EQ(l[10].end, 5000u);
  trieChain("m", "", std::string(600, 'x'), a);
  ASSERT_EQ(a.size(), 3u);  // 256 + 256 + 88
  EXPECT_EQ(a[0].end, 256u);
  EXPECT_EQ(a[1].end, 512u);
  EXPECT_EQ(a[2].end, 600u);
  trieChain("m", "", std::string(512, 'x') + "y", b);
  EXPECT_EQ(a[1].key, b[1].key);  // same first 512 bytes: same nodes
  EXPECT_NE(a[2].key, b[2].key);
  trieChain("other-model", "", std::string(600, 'x'), b);
  EXPECT_NE(a[0].key, b[0].key);  // keyed under the model
  trieChain("m", "salt", std::string(600, 'x'), b);
  EXPECT_NE(a[0].key, b[0].key);  // and the cache salt
}

// A request context whose rendered prompt is `text` (the whole prompt: nothing cut).
struct Prompt {
  RequestFacts f;
  CycleState cycle;  // this request's
  RequestContext ctx;
  Prompt(const std::string& text, uint64_t /*request number*/) {
    f.parsed = f.has_prompt = true;
    f.model = "m";
    f.prompt_prefix = text;
    f.prompt_render_total = text.size();
    ctx.facts = &f;
    ctx.cycle = &cycle;
  }
};

TEST(PrefixTrieStage, FollowsThePrefixWhenItCoversTheThreshold) {
  Pool p({1, 1, 1, 2});
  p.rule.service_args = {{"pd_cache_threshold", 20}, {"pd_balance_abs_threshold", 3}};
  auto stage = makePrefixTrie(p.services());
  CandidateSet c{p.eps, p.excluded};
  const std::string base(1000, 'a');
  Prompt first(base, 1);
  EXPECT_EQ(stage->evaluate(first.ctx, c).reason, FallReason::kNoWorker);  // nothing routed yet
  stage->observe(first.ctx, 2);  // some tier sent it to endpoint 2
  // 512 of 1000 bytes shared: 51% >= 20%: endpoint 2.
  Prompt half(base.substr(0, 512) + std::string(488, 'b'), 2);
  auto r = stage->evaluate(half.ctx, c);
  EXPECT_EQ(r.index, 2);
  EXPECT_EQ(r.key, DecisionKey::kPrefix);
  // 256 of 2000 bytes: 12.8% < 20%: shallow.
  Prompt thin(base.substr(0, 256) + std::string(1744, 'c'), 3);
  EXPECT_EQ(stage->evaluate(thin.ctx, c).reason, FallReason::kShallow);
  // The last endpoint to serve a prefix owns it.
  stage->observe(half.ctx, 0);
  Prompt again(base.substr(0, 512) + std::string(488, 'd'), 4);
  EXPECT_EQ(stage->evaluate(again.ctx, c).index, 0);
  // The owner is masked: excluded, never another endpoint.
  p.excluded[0] = true;
  EXPECT_EQ(stage->evaluate(again.ctx, c).reason, FallReason::kExcluded);
}

TEST(PrefixTrieStage, ImbalanceBypassesAffinity) {
  Pool p({1, 1, 2});
  auto stage = makePrefixTrie(p.services());  // default threshold 3
  CandidateSet c{p.eps, p.excluded};
  Prompt x(std::string(300, 'q'), 1);
  stage->observe(x.ctx, 0);
  p.eps[0].state->active = 4;  // 4 - 1 = 3: not more than 3, affinity holds
  p.eps[1].state->active = 1;
  EXPECT_EQ(stage->evaluate(x.ctx, c).index, 0);
  p.eps[0].state->active = 5;  // 5 - 1 = 4 > 3
  EXPECT_EQ(stage->evaluate(x.ctx, c).reason, FallReason::kImbalance);
  p.eps[2].state->active = 100;  // a decode endpoint's load does not count (masked)
  p.eps[0].state->active = 1;
  EXPECT_EQ(stage->evaluate(x.ctx, c).index, 0);
}

TEST(PrefixTrie, IsBoundedAndForgetsTheLeastRecentlyTouched) {
  PrefixTrie t(16);  // one node per shard
  std::vector<TrieNode> a, b;
  trieChain("m", "", std::string(256, 'a'), a);
  t.insert(a, 1, {});
  EXPECT_EQ(t.longest(a).endpoint, 1u);
  for (int i = 0; i < 200; ++i) {  // 200 other prompts: every shard overflows
    trieChain("m", "", std::string(256, static_cast<char>('b' + i % 20)) + std::to_string(i), b);
    t.insert(b, 2, {});
  }
  EXPECT_LE(t.size(), 16u);
  EXPECT_EQ(t.longest(a).bytes, 0u);
}

}  // namespace
}  // namespace kvgate::routing

namespace kvgate::routing {
namespace {

TEST(Controller, TheViewHoldsForItsIntervalThenGlidesToNeutral) {
  using endpoints::ControllerState;
  using endpoints::controllerView;
  const int64_t iv = 10 * kSec;
  auto v = controllerView(ControllerState::kDisabled, 3.0, 0, 0, 5 * kSec);
  EXPECT_EQ(v.state, ControllerState::kActive);  // interval 0: no controller, neutral
  EXPECT_EQ(v.weight, 1.0);
  v = controllerView(ControllerState::kDisabled, 3.0, 0, iv, 10 * kSec);  // within the interval
  EXPECT_EQ(v.state, ControllerState::kDisabled);
  EXPECT_EQ(v.weight, 3.0);
  EXPECT_FALSE(v.stale);
  v = controllerView(ControllerState::kDisabled, 3.0, 0, iv, 15 * kSec);  // half way back
  EXPECT_EQ(v.state, ControllerState::kDisabled);
  EXPECT_DOUBLE_EQ(v.weight, 2.0);  // 3 + (1 - 3) * 0.5
  EXPECT_TRUE(v.stale);
  v = controllerView(ControllerState::kDraining, 0.2, 0, iv, 19 * kSec);  // never towards zero
  EXPECT_DOUBLE_EQ(v.weight, 0.2 + 0.8 * 0.9);
  v = controllerView(ControllerState::kDisabled, 0.2, 0, iv, 20 * kSec + 1);  // two intervals
  EXPECT_EQ(v.state, ControllerState::kActive);
  EXPECT_EQ(v.weight, 1.0);
}

TEST(Session, DrainingEndpointsKeepTheirSessionsAndTakeNoNewOnes) {
  Pool p({1, 1, 2});
  auto stage = makeSession(p.services());
  CandidateSet c{p.eps, p.excluded};
  auto& s0 = *p.eps[0].state;  // the controller drains prefill 0 (interval 60 s)
  s0.ctl_state = static_cast<int>(endpoints::ControllerState::kDraining);
  s0.ctl_updated_ns = p.clock.nowNs();
  s0.ctl_interval_ns = 60 * kSec;
  RequestContext pinned;
  pinned.conversation_key = 1;
  p.sessions.pin(1, {1, 3}, p.clock.nowNs());
  EXPECT_EQ(stage->evaluate(pinned, c).index, 0);  // its conversation stays
  EXPECT_FALSE(p.excluded[0]);
  RequestContext fresh;
  fresh.conversation_key = 2;
  EXPECT_EQ(stage->evaluate(fresh, c).reason, FallReason::kUnpinned);
  EXPECT_TRUE(p.excluded[0]);  // no new session there: the later tiers do not see it
  EXPECT_FALSE(p.excluded[1]);
  // Two intervals without an update: neutral again.
  p.excluded.assign(3, false);
  p.excluded[2] = true;
  p.clock.advance(std::chrono::seconds(121));
  EXPECT_EQ(stage->evaluate(fresh, c).reason, FallReason::kUnpinned);
  EXPECT_FALSE(p.excluded[0]);
}

}  // namespace
}  // namespace kvgate::routing
