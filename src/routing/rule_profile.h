// What a rule routes with, derived from its fields and the environment's defaults (RoutingEnv):
// the stages of its pipeline and the effective value of every routing knob it uses. The data
// plane builds pipelines from stageNames(); the management API shows effectiveRouting() as the
// rule's GET "effective" block and the data plane exports it as kvgate_rule_routing_info, so an
// operator sees what runs, not only what was asked for.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/rule.h"
#include "routing/routing_env.h"

namespace kvgate::routing {

// The stage names of a rule's pipeline: P/D rules the ladder (session, prefix_trie when
// pd_cache_aware_mode, kv_exact when kvExactMode 1, min_load); others Tier 1.5 (kv_exact) first
// for kvExactMode 3, then the selector stage: the extension field `selector` when set (stages
// without a sel number, such as random), else `sel`. Empty when this build lacks the selector.
std::vector<std::string> stageNames(const config::RuleSpec& rule);

// {"stages":[...], then the knobs of those stages with their values: kv_exact's law (kvLbMode
// with "kvLbModeFrom": rule, environment or default) and tuning, the P/D tables' bounds, lc_light's
// threshold}. Every value is the one the stage is built with.
nlohmann::json effectiveRouting(const config::RuleSpec& rule, const RoutingEnv& env);

}  // namespace kvgate::routing
