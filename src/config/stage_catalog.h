// The routing stages a rule may name, as the facts the configuration checks: each stage's name,
// its `sel` alias, the seed's P/D ladder tier it stands for, whether the rule field `selector`
// may name it, and the rule fields that tune it. One table: routing/stage_registry.cc builds its
// entries (a factory, fall-through reasons) from these facts by name, and the compiler refuses a
// registry entry this table lacks; config/rule.cc checks a `pdLadder` by tiers, config/fields.cc
// takes the `selector` values from here, and the data plane asks the registry for a tier's stage.
// Adding a stage: one entry here, one in the registry (routing/stage_registry.cc).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

namespace kvgate::config {

// The seed's P/D ladder tier a stage stands for: Tier 0 session pins, Tier 1 the prefix trie,
// Tier 1.5 KV-exact (also what marks the stage whose Tier 1.5 metrics the data plane renders),
// Tier 2 min-load (the stage that always picks: a ladder's last, and the decode and pooling pick).
enum class LadderTier : uint8_t { kNone, kTier0, kTier1, kTier15, kTier2 };

struct StageFacts {
  std::string_view name;
  int sel = -1;  // the seed's selector number; -1 when the stage has none
  LadderTier tier = LadderTier::kNone;
  bool selector_field = false;  // the rule field `selector` may name it (stages without a sel)
  // serviceArguments fields that tune only this stage: a pdLadder that leaves the stage out
  // refuses them (they would do nothing).
  std::span<const std::string_view> knobs = {};
};

inline constexpr std::string_view kSessionKnobs[] = {"pd_session_ttl_sec"};
inline constexpr std::string_view kPrefixTrieKnobs[] = {"pd_cache_threshold",
                                                        "pd_balance_abs_threshold"};

inline constexpr StageFacts kStageCatalog[] = {
    {"kv_exact", -1, LadderTier::kTier15},
    {"session", -1, LadderTier::kTier0, false, kSessionKnobs},
    {"prefix_trie", -1, LadderTier::kTier1, false, kPrefixTrieKnobs},
    {"min_load", -1, LadderTier::kTier2},
    {"rr", 0},
    {"hash", 1},
    {"wrr", 2},
    {"persist", 3},
    {"lc", 4},
    {"chwbl", 8},
    {"gpuaware", 9},
    {"wrr_hash", 10},
    {"random", -1, LadderTier::kNone, true},
    {"lc_light", -1, LadderTier::kNone, true},
    {"sglang", -1, LadderTier::kNone, true},
    {"sglang-cli", -1, LadderTier::kNone, true},
    {"smg", -1, LadderTier::kNone, true},
};

// The stage named `name`; null when none is.
constexpr const StageFacts* stageFacts(std::string_view name) {
  for (const auto& s : kStageCatalog)
    if (s.name == name) return &s;
  return nullptr;
}

// The stage that stands for ladder tier `t`, one of the four (each has exactly one stage: a
// static_assert below). kNone has none: passing it is a bug (a compile error in a constant
// expression, a null dereference otherwise).
constexpr const StageFacts& stageOfTier(LadderTier t) {
  const StageFacts* found = nullptr;
  for (const auto& s : kStageCatalog)
    if (t != LadderTier::kNone && s.tier == t) found = &s;
  return *found;
}

namespace detail {
constexpr bool oneStagePerTier() {
  for (auto t : {LadderTier::kTier0, LadderTier::kTier1, LadderTier::kTier15, LadderTier::kTier2}) {
    int n = 0;
    for (const auto& s : kStageCatalog) n += s.tier == t;
    if (n != 1) return false;
  }
  return true;
}
constexpr bool namesAndSelsUnique() {
  for (const auto& a : kStageCatalog) {
    int names = 0, sels = 0;
    for (const auto& b : kStageCatalog) {
      names += a.name == b.name;
      sels += a.sel >= 0 && a.sel == b.sel;
    }
    if (names != 1 || sels > 1) return false;
  }
  return true;
}
}  // namespace detail
static_assert(detail::oneStagePerTier(), "each P/D ladder tier names exactly one stage");
static_assert(detail::namesAndSelsUnique(), "each stage name and sel number is listed once");

}  // namespace kvgate::config
