// session: Tier 0 of the P/D ladder (seed 000, "Tier 0 — session stickiness").
//
// Algorithm: the conversation key (the X-Conversation-Id header, else the body's user_id) looks
// up its pin in the rule's SessionTable. A live pin whose prefill endpoint is still a candidate
// (in the rule, not masked) and whose decode endpoint is up and not behind an open breaker picks
// that prefill endpoint and hands the decode endpoint to the decode pick (StageResult::peer);
// a pin that fails any check is evicted and the ladder continues: stickiness never overrides
// health. A request that gets no pin here starts no session on the controller's DRAINING
// endpoints: they leave the later tiers' candidates (a pinned conversation may still go there). The
// data plane pins (prefill, decode) after each P/D pick of a keyed request, so a pin lives
// pd_session_ttl_sec after the conversation's last request. Knobs: pd_session_ttl_sec (rule; 0 =
// 300 s), LOXILB_PD_SESSION_MAX (entries per rule, 100000). Falls: no_key (no conversation key),
// unpinned (no live pin), pin_evicted.
#include "routing/stages/pd_ladder.h"
#include "routing/stages/session_table.h"

namespace kvgate::routing {
namespace {

class SessionStage : public Stage {
 public:
  SessionStage(const StageServices& s, SessionTable& table)
      : clock_(s.clock), endpoints_(s.endpoints), table_(table), cb_(s.rule.cb_enable) {
    const auto& sa = s.rule.service_args;
    const int64_t ttl = sa.is_object() ? sa.value("pd_session_ttl_sec", int64_t{0}) : 0;
    ttl_ns_ = (ttl > 0 ? ttl : 300) * 1'000'000'000LL;
  }
  uint32_t needs() const override { return kNeedUserId; }

  StageResult evaluate(const RequestContext& ctx, CandidateSet& c) override {
    const int64_t now = clock_.nowNs();
    if (!ctx.conversation_key) return fall(FallReason::kNoKey, c, now);
    auto pin = table_.lookup(*ctx.conversation_key, now, ttl_ns_);
    if (!pin) return fall(FallReason::kUnpinned, c, now);
    int p = -1, d = -1;
    for (size_t i = 0; i < endpoints_.size(); ++i) {
      const auto id = endpoints_[i].state->id;
      if (id == pin->prefill && endpoints_[i].role == 1) p = static_cast<int>(i);
      if (id == pin->decode && endpoints_[i].role == 2) d = static_cast<int>(i);
    }
    const bool ok = p >= 0 && !c.excluded[static_cast<size_t>(p)] && d >= 0 &&
                    usable(*endpoints_[static_cast<size_t>(d)].state);
    if (!ok) {
      table_.evict(*ctx.conversation_key);
      return fall(FallReason::kPinEvicted, c, now);
    }
    StageResult r = StageResult::pick(p, DecisionKey::kConversation);
    r.peer = d;
    return r;
  }

 private:
  // A request that starts no session here: the controller's DRAINING endpoints take none, so
  // they leave the candidates of the later tiers.
  static StageResult fall(FallReason why, CandidateSet& c, int64_t now) {
    for (size_t i = 0; i < c.size(); ++i)
      if (c.endpoints[i].state->controller(now).state == endpoints::ControllerState::kDraining)
        c.excluded[i] = true;
    return StageResult::fall(why);
  }
  // A pinned decode endpoint: up, breaker not open, not DISABLED (DRAINING keeps its sessions).
  bool usable(const endpoints::EndpointState& s) const {
    return s.health.up() && !(cb_ && s.health.breaker() == endpoints::BreakerState::kOpen) &&
           s.controller(clock_.nowNs()).state != endpoints::ControllerState::kDisabled;
  }
  const common::Clock& clock_;
  const std::vector<PoolEndpoint>& endpoints_;
  SessionTable& table_;
  const bool cb_;
  int64_t ttl_ns_;
};

// Without a table (a rule that is not P/D): never pinned.
class NoSessionStage : public Stage {
 public:
  StageResult evaluate(const RequestContext&, CandidateSet&) override {
    return StageResult::fall(FallReason::kUnpinned);
  }
};

}  // namespace

std::unique_ptr<Stage> makeSession(const StageServices& s) {
  if (!s.sessions) return std::make_unique<NoSessionStage>();
  return std::make_unique<SessionStage>(s, *s.sessions);
}


}  // namespace kvgate::routing
