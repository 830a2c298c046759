// pd_role: on a P/D rule (pd_disagg_mode), drops an endpoint whose ep_role is not the role of the
// leg being routed (EligibilityContext::role: 1 the prefill pick, 2 the decode pick, 0 the
// role-less rescue). Its drops are not counted: every P/D request has them.
#include "routing/eligibility/filters.h"

namespace kvgate::routing::eligibility {

const CandidateFilter kPdRole{"pd_role", false,
                              [](const config::RuleSpec& rule) {
                                return rule.service_args.is_object() &&
                                       rule.service_args.value("pd_disagg_mode", false);
                              },
                              [](const PoolEndpoint& e, const EligibilityContext& ctx) {
                                return ctx.role >= 0 && e.role != ctx.role;
                              }};

}  // namespace kvgate::routing::eligibility
