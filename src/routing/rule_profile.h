// What a rule routes with, derived from its fields and the environment's defaults (RoutingEnv):
// the stages of its pipeline and the effective value of every routing knob it uses. The data
// plane builds pipelines from stageNames(); the management API shows effectiveRouting() as the
// rule's GET "effective" block and the data plane exports it as kvgate_rule_routing_info, so an
// operator sees what runs, not only what was asked for.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/rule.h"
#include "config/scoring_profile.h"
#include "routing/routing_env.h"

namespace kvgate::routing {

// The stage names of a rule's pipeline: P/D rules their `pdLadder` when set, else the ladder the
// flags derive (session, prefix_trie when pd_cache_aware_mode, kv_exact when kvExactMode 1,
// min_load); others Tier 1.5 (kv_exact) first
// for kvExactMode 3, then the selector stage: the extension field `selector` when set (stages
// without a sel number, such as random), else `sel`. Empty when this build lacks the selector.
std::vector<std::string> stageNames(const config::RuleSpec& rule);

// {"stages":[...], "candidateFilters":[...], on P/D rules "stagesFrom" (pdLadder or
// pd_disagg_mode), then the knobs of those stages with their values: kv_exact's law (kvLbMode
// with "kvLbModeFrom": rule, environment or default) and tuning, the P/D tables' bounds, lc_light's
// threshold}. Every value is the one the stage is built with.
nlohmann::json effectiveRouting(const config::RuleSpec& rule, const RoutingEnv& env);

// A selection law as the scoring profile that picks as it does (but among candidates that tie):
// off (prefix), hard / adaptive / taper with spill relief (bounded_load, then prefix), soft and
// adaptive-soft (soft_cost), ttft (ttft_cost), predict and predict-q (their scorers with the law's
// decode weight and batch offset), lmetric (predict without capacity shares), dynamo and
// dynamo-v1 (their costs), llm-d and llm-d-sticky (its tau), each with the law's miss rule and
// cold-start seeding; nullopt only for the capped laws without spill relief (P/D rules), which
// keep a saturated request on its affinity set. A unit test checks each against its law on random
// fleets; the effective block shows it as kvLbModeProfile. The laws stay the fast path (one
// formula: 0.08-0.13 us a decision against 0.2-0.35 us for a profile).
std::optional<config::ScoringProfileSpec> lawAsProfile(const LawParams& law);

}  // namespace kvgate::routing
