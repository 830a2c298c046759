// healthy: drops an endpoint whose active probe is down or that passive detection holds down
// (endpoints/health.h: consecutive connect failures mark it down for passive_hold). Every rule.
#include "routing/eligibility/filters.h"

namespace kvgate::routing::eligibility {

const CandidateFilter kHealthy{
    "healthy", true, [](const config::RuleSpec&) { return true; },
    [](const PoolEndpoint& e, const EligibilityContext&) { return !e.state->health.up(); }};

}  // namespace kvgate::routing::eligibility
