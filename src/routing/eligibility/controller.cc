// controller: the external controller's last word on the endpoint (endpoints/controller.h; no
// word, or a word older than twice its interval, reads ACTIVE): DISABLED is dropped, DRAINING is
// dropped for a request that would start something new there (EligibilityContext::draining; a
// request pinned to a stored response there may still go). Every rule; free for endpoints no
// controller speaks for.
#include "routing/eligibility/filters.h"

namespace kvgate::routing::eligibility {

const CandidateFilter kController{
    "controller", true, [](const config::RuleSpec&) { return true; },
    [](const PoolEndpoint& e, const EligibilityContext& ctx) {
      if (e.state->ctl_interval_ns.load(std::memory_order_relaxed) == 0) return false;
      const auto s = e.state->controller(ctx.now_ns).state;
      return s == endpoints::ControllerState::kDisabled ||
             (ctx.draining && s == endpoints::ControllerState::kDraining);
    }};

}  // namespace kvgate::routing::eligibility
