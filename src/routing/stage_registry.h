// The name-keyed registry of routing stages.
//
// Every stage has one name, and its facts (sel alias, ladder tier, knobs) in
// config/stage_catalog.h (`chwbl` <-> ChwblStage <-> stage_registry entry "chwbl"); the
// selectors of the upstream gateway's `sel` numbers are aliases: 0 rr, 1 hash, 2 wrr, 3 persist,
// 4 lc, 8 chwbl, 9 gpuaware, 10 wrr_hash. A factory receives StageServices, never globals.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "routing/stage.h"

namespace kvgate::routing {

using StageFactory = std::unique_ptr<Stage> (*)(const StageServices&);

struct StageInfo {
  std::string_view name;
  int sel;  // the seed's selector number, -1 when the stage has none
  StageFactory make;
  Ladder ladder = Ladder::kNone;  // the P/D ladder tier it stands for
  // The reasons it falls through with, declared by the stage (its header): metrics show these
  // for it (all_excluded and empty_pool, which the pipeline itself may record, come first).
  std::span<const FallReason> reasons = kSelectorReasons;
  // It reads what the engines' /metrics say (KV capacity, waiting requests, KV usage): the data
  // plane scrapes the endpoints of rules whose pipeline has such a stage (proxy/load_scraper.h).
  bool reads_engine_metrics = false;
  // Writes the environment knobs it reads (RoutingEnv) into a rule's `effective` block; null
  // when it reads none (Tier 1.5's, which has many, are written by rule_profile.cc).
  void (*env_knobs)(nlohmann::json& out, const RoutingEnv& env) = nullptr;
};

// The stage registered under `name` (or a decimal `sel` alias such as "8"); null when unknown.
const StageInfo* findStage(std::string_view name);
// The stage standing for a P/D ladder tier (Tier 2 is also the decode and pooling pick).
const StageInfo& stageForTier(Ladder tier);
// The stage of a rule's `sel`; null for selectors this build does not implement.
const StageInfo* stageForSel(int sel);

}  // namespace kvgate::routing
