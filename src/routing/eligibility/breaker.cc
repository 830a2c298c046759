// breaker: drops an endpoint whose circuit breaker is OPEN (endpoints/health.h), on rules with
// cb_enable. A HALF_OPEN endpoint is kept: the pick takes its single trial (Health::admits) and
// the data plane moves on when the trial is already out.
#include "routing/eligibility/filters.h"

namespace kvgate::routing::eligibility {

const CandidateFilter kBreaker{"breaker", true,
                               [](const config::RuleSpec& rule) { return rule.cb_enable; },
                               [](const PoolEndpoint& e, const EligibilityContext&) {
                                 return e.state->health.breaker() == endpoints::BreakerState::kOpen;
                               }};

}  // namespace kvgate::routing::eligibility
