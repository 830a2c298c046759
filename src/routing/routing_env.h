// RoutingEnv: the routing defaults the environment sets, read once when `kvgate serve` starts and
// injected into every stage through StageServices (issue 29 §1 "typed config"). Nothing under
// src/routing/ reads the environment: readRoutingEnv() takes a lookup function (serve passes
// std::getenv; tests pass a map), so what a rule runs with is fixed at start and shown per rule
// (effectiveRouting: the rule's GET "effective" block and kvgate_rule_routing_info).
//
// Knobs (name, range, default), each documented in docs/configuration.md:
//   LOXILB_KV_LB_MODE              a selection law (parseLawMode), for kvExactMode rules without
//                                  kvLbMode       predict-q (kvExactMode 3), predict (P/D rules)
//   LOXILB_KV_MEAN_LOAD_FACTOR     hard/adaptive cap, percent of the mean load  100..300  175
//   LOXILB_KV_TTFT_MISS_WEIGHT_PCT ttft law: weight of uncached blocks, x100    0..10000  800
//   LOXILB_KV_TTFT_LOAD_BLOCKS     ttft law: blocks of cost per in-flight request 0..1e6  2
//   LOXILB_KV_STICKY_TAU_TOKENS    llm-d-sticky: token load that drops affinity 1..1e9  286720
//   LOXILB_KV_SPILL_RELIEF         on/off (default on, off for P/D rules)
//   LLB_KV_MIN_MATCH_TOKENS        Tier 1.5: fewest matched tokens that decide  0..4096   16
//   LOXILB_KV_SPECULATIVE_TTL_MS   speculative credits' life                    0..600000 2000
//   LOXILB_KV_COLDSTART_MIN_BLOCKS cold start: blocks below which seeding runs  0..1e9    16
//   LOXILB_KV_COLDSTART_SEED_Nth   cold start: every Nth decision seeds         0..1e6    16
//   LOXILB_PD_TRIE_MAX_NODES       P/D Tier 1 trie bound                        16..1e8   262144
//   LOXILB_PD_SESSION_MAX          P/D Tier 0 session table bound               1..1e8    100000
//   LOXILB_LC_LIGHT_BELOW          lc_light: in-flight x100 below which it round-robins
//                                                                                0..100000 400
//   LLB_FC_*                       the P/D admission gate's defaults (config/admission.h)
// A value out of range or not a number is ignored with a warning (the default stays).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/admission.h"
#include "routing/stages/selection_law.h"

namespace kvgate::routing {

struct RoutingEnv {
  LawParams law;                      // mode unused: see lb_mode
  std::optional<LawMode> lb_mode;     // LOXILB_KV_LB_MODE
  std::optional<bool> spill_relief;   // LOXILB_KV_SPILL_RELIEF (unset: on, off for P/D rules)
  uint32_t min_match_tokens = 16;
  uint32_t speculative_ttl_ms = 2000;
  uint32_t coldstart_min_blocks = 16;
  uint32_t coldstart_seed_nth = 16;
  size_t trie_max_nodes = 262'144;  // PrefixTrie::kDefaultMaxNodes
  size_t session_max = 100'000;     // SessionTable::kDefaultMaxEntries
  int64_t lc_light_below_x100 = 400;
  config::AdmissionEnv admission;  // LLB_FC_* (P/D rules' admission gate)
};

using EnvLookup = std::function<const char*(const char*)>;

// Reads every knob above through `env`; each ignored value adds a line to `warnings`.
RoutingEnv readRoutingEnv(const EnvLookup& env, std::vector<std::string>& warnings);
// Every default (an empty environment): what tests and benches get without one.
const RoutingEnv& defaultRoutingEnv();

}  // namespace kvgate::routing
