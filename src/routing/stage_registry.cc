#include "routing/stage_registry.h"

#include <array>
#include <charconv>

#include "routing/selectors/selectors.h"
#include "routing/stages/kv_exact.h"
#include "routing/stages/pd_ladder.h"

namespace kvgate::routing {
namespace {

constexpr std::array<StageInfo, 17> kStages = {{
    {"kv_exact", -1, &makeKvExactFromServices, Ladder::kTier15, kKvExactReasons, true},
    {"session", -1, &makeSession, Ladder::kTier0, kSessionReasons},  // the P/D ladder's Tier 0
    {"prefix_trie", -1, &makePrefixTrie, Ladder::kTier1, kPrefixTrieReasons},  // Tier 1
    {"min_load", -1, &makeMinLoad, Ladder::kTier2},  // Tier 2 and the decode pick
    {"rr", 0, &makeRoundRobin},
    {"hash", 1, &makeSourceHash},
    {"wrr", 2, &makeWeightedRoundRobin},
    {"persist", 3, &makePersist},
    {"lc", 4, &makeLeastConnections},
    {"chwbl", 8, &makeChwbl},
    {"gpuaware", 9, &makeGpuAware},
    {"wrr_hash", 10, &makeWrrHash},
    {"random", -1, &makeRandom},
    {"lc_light", -1, &makeLcLight},  // the rule field `selector` names stages without a sel number
    {"sglang", -1, &makeSglang},
    {"sglang-cli", -1, &makeSglangCli},
    {"smg", -1, &makeSmg, Ladder::kNone, kSelectorReasons, true},
}};

}  // namespace

const StageInfo* findStage(std::string_view name) {
  for (const auto& s : kStages)
    if (s.name == name) return &s;
  int sel = -1;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), sel);
  if (ec == std::errc() && p == name.data() + name.size()) return stageForSel(sel);
  return nullptr;
}

const StageInfo* stageForSel(int sel) {
  if (sel < 0) return nullptr;  // stages without a sel number (kv_exact) have no alias
  for (const auto& s : kStages)
    if (s.sel == sel) return &s;
  return nullptr;
}

}  // namespace kvgate::routing
