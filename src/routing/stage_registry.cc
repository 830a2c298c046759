#include "routing/stage_registry.h"

#include <charconv>

#include <nlohmann/json.hpp>

#include "routing/selectors/selectors.h"
#include "routing/stages/kv_exact.h"
#include "routing/stages/pd_ladder.h"

namespace kvgate::routing {
namespace {

// A registry entry: the stage's facts (config/stage_catalog.h, by name: an entry the catalog
// lacks does not compile) with its factory and the reasons it falls through with.
constexpr StageInfo entry(std::string_view name, StageFactory make,
                          std::span<const FallReason> reasons = kSelectorReasons,
                          bool reads_engine_metrics = false,
                          void (*env_knobs)(nlohmann::json&, const RoutingEnv&) = nullptr) {
  const config::StageFacts& f = *config::stageFacts(name);
  return StageInfo{f.name, f.sel, make, f.tier, reasons, reads_engine_metrics, env_knobs};
}

void sessionKnobs(nlohmann::json& out, const RoutingEnv& env) {
  out["session_max"] = env.session_max;
}
void trieKnobs(nlohmann::json& out, const RoutingEnv& env) {
  out["trie_max_nodes"] = env.trie_max_nodes;
}
void lcLightKnobs(nlohmann::json& out, const RoutingEnv& env) {
  out["lc_light_below_x100"] = env.lc_light_below_x100;
}

constexpr StageInfo kStages[] = {
    entry("kv_exact", &makeKvExactFromServices, kKvExactReasons, true),
    entry("session", &makeSession, kSessionReasons, false, &sessionKnobs),  // P/D Tier 0
    entry("prefix_trie", &makePrefixTrie, kPrefixTrieReasons, false, &trieKnobs),  // Tier 1
    entry("min_load", &makeMinLoad),                          // Tier 2 and the decode pick
    entry("rr", &makeRoundRobin),
    entry("hash", &makeSourceHash),
    entry("wrr", &makeWeightedRoundRobin),
    entry("persist", &makePersist),
    entry("lc", &makeLeastConnections),
    entry("chwbl", &makeChwbl),
    entry("gpuaware", &makeGpuAware),
    entry("wrr_hash", &makeWrrHash),
    entry("random", &makeRandom),
    entry("lc_light", &makeLcLight, kSelectorReasons, false, &lcLightKnobs),
    entry("sglang", &makeSglang),
    entry("sglang-cli", &makeSglangCli),
    entry("smg", &makeSmg, kSelectorReasons, true),
};

// Each stage of the catalog registered exactly once (and, through entry(), nothing else).
constexpr bool registryMatchesCatalog() {
  for (const auto& f : config::kStageCatalog) {
    int n = 0;
    for (const auto& s : kStages) n += s.name == f.name;
    if (n != 1) return false;
  }
  return std::size(kStages) == std::size(config::kStageCatalog);
}
static_assert(registryMatchesCatalog(),
              "every stage of config/stage_catalog.h has exactly one entry here");

}  // namespace

const StageInfo* findStage(std::string_view name) {
  for (const auto& s : kStages)
    if (s.name == name) return &s;
  int sel = -1;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), sel);
  if (ec == std::errc() && p == name.data() + name.size()) return stageForSel(sel);
  return nullptr;
}

const StageInfo& stageForTier(Ladder tier) { return *findStage(config::stageOfTier(tier).name); }

const StageInfo* stageForSel(int sel) {
  if (sel < 0) return nullptr;  // stages without a sel number (kv_exact) have no alias
  for (const auto& s : kStages)
    if (s.sel == sel) return &s;
  return nullptr;
}

}  // namespace kvgate::routing
