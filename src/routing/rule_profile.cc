#include "routing/rule_profile.h"

#include <algorithm>
#include <cmath>

#include "routing/eligibility/eligibility.h"
#include "routing/stage_registry.h"
#include "routing/stages/kv_exact.h"

namespace kvgate::routing {

std::vector<std::string> stageNames(const config::RuleSpec& rule) {
  const auto& sa = rule.service_args;
  if (!sa.is_object()) return {};
  if (sa.value("pd_disagg_mode", false)) {  // the P/D ladder's prefill pick
    if (auto l = sa.find("pdLadder"); l != sa.end() && l->is_array())  // (validated when stored)
      return l->get<std::vector<std::string>>();
    // The seed's ladder: Tier 0, [Tier 1], [Tier 1.5], Tier 2.
    std::vector<std::string> names{std::string(stageForTier(Ladder::kTier0).name)};
    if (sa.value("pd_cache_aware_mode", false))
      names.emplace_back(stageForTier(Ladder::kTier1).name);
    if (sa.value("kvExactMode", 0) == 1) names.emplace_back(stageForTier(Ladder::kTier15).name);
    names.emplace_back(stageForTier(Ladder::kTier2).name);
    return names;
  }
  const std::string named = sa.value("selector", std::string());
  const StageInfo* info = named.empty() ? stageForSel(rule.sel) : findStage(named);
  if (!info) return {};
  std::vector<std::string> names;
  if (sa.value("kvExactMode", 0) == 3) names.emplace_back(stageForTier(Ladder::kTier15).name);
  names.emplace_back(info->name);
  return names;
}

namespace {
// The environment knobs of the stages other than Tier 1.5's (each stage's registry entry).
nlohmann::json withOthers(nlohmann::json out, const std::vector<std::string>& names,
                          const RoutingEnv& env) {
  for (const auto& n : names)
    if (const StageInfo* info = findStage(n); info && info->env_knobs) info->env_knobs(out, env);
  return out;
}

// P/D rules: the admission gate's settings (config/admission.h).
void withAdmission(nlohmann::json& out, const config::RuleSpec& rule, const RoutingEnv& env) {
  const auto& sa = rule.service_args;
  if (!sa.is_object() || !sa.value("pd_disagg_mode", false)) return;
  const config::AdmissionConfig a = config::admissionConfig(rule, env.admission);
  out["fc_mode"] = config::admissionModeName(a.mode);
  out["fc_max_outstanding"] = a.max_outstanding;
  out["fc_prefill_max_inflight"] = a.prefill_max;
  out["fc_decode_max_inflight"] = a.decode_max;
  out["fc_max_queue_depth"] = a.queue_depth;
  out["fc_max_queue_wait_ms"] = a.queue_wait_ms;
}
}  // namespace

std::optional<config::ScoringProfileSpec> lawAsProfile(const LawParams& law) {
  auto builtin = [](const char* name) {
    auto s = config::parseScoringProfile(name, "kvLbMode");
    std::optional<config::ScoringProfileSpec> out;
    if (s) out = std::move(*s);
    return out;
  };
  std::optional<config::ScoringProfileSpec> s;
  switch (law.mode) {
    case LawMode::kOff:
      s = builtin("hard");  // (its prefix scorer and miss rule, no cap)
      if (s) s->filters.clear();
      break;
    case LawMode::kHard:
    case LawMode::kAdaptive:
    case LawMode::kTaper:
      if (!law.spill_relief) return std::nullopt;
      s = builtin(law.mode == LawMode::kHard       ? "hard"
                  : law.mode == LawMode::kAdaptive ? "adaptive"
                                                   : "taper");
      if (s && law.mode == LawMode::kHard)
        s->filters[0].params["factorPct"] = law.mean_load_factor_pct;
      break;
    case LawMode::kPredict:
    case LawMode::kPredictQ:
      s = builtin(law.mode == LawMode::kPredict ? "predict" : "predict-q");
      if (s) {
        s->scorers[0].params["decodeWeight"] = law.predict_decode_weight_pct / 100.0;
        s->scorers[0].params["batchOffset"] = law.predict_batch_offset;
      }
      break;
    case LawMode::kLlmd:
      s = builtin("llm-d");
      break;
    case LawMode::kLlmdSticky:
      s = builtin("llm-d-sticky");
      if (s) s->filters[0].params["tauTokens"] = static_cast<double>(law.sticky_tau_tokens);
      break;
    case LawMode::kSoft:
    case LawMode::kAdaptiveSoft:
    case LawMode::kTtft: {
      // One cost scorer each; misses to the rule's selector, cold-start seeding on (the seed's
      // laws and ours).
      const bool ttft = law.mode == LawMode::kTtft;
      auto parsed = config::parseScoringProfile(
          {{"scorers",
            {ttft ? nlohmann::json{{"name", "ttft_cost"},
                                   {"missWeightPct", std::round(law.ttft_miss_weight * 100)},
                                   {"loadBlocks", law.ttft_load_blocks}}
                  : nlohmann::json{{"name", "soft_cost"},
                                   {"lambda", law.soft_lambda},
                                   {"adaptive", law.mode == LawMode::kAdaptiveSoft ? 1 : 0}}}},
           {"onMiss", "selector"},
           {"coldStartSeeding", true}},
          "kvLbMode");
      if (parsed) s = std::move(*parsed);
      break;
    }
    case LawMode::kLmetric:
    case LawMode::kDynamo:
    case LawMode::kDynamoV1: {
      // The peers' formulas: misses placed by the same formula, no cold-start seeding.
      const nlohmann::json scorer =
          law.mode == LawMode::kLmetric
              ? nlohmann::json{{"name", "predict"},
                               {"decodeWeight", 1},
                               {"batchOffset", 1},
                               {"capacityShare", 0}}
              : nlohmann::json{
                    {"name", law.mode == LawMode::kDynamo ? "dynamo_cost" : "dynamo_v1_cost"}};
      auto parsed = config::parseScoringProfile(
          {{"scorers", {scorer}}, {"onMiss", "score"}, {"coldStartSeeding", false}}, "kvLbMode");
      if (parsed) s = std::move(*parsed);
      break;
    }
  }
  if (s) s->builtin.clear();  // (its parameters are the law's, not the built-in's)
  return s;
}

nlohmann::json effectiveRouting(const config::RuleSpec& rule, const RoutingEnv& env) {
  const auto names = stageNames(rule);
  nlohmann::json out = {{"stages", names}, {"candidateFilters", Eligibility(rule).names()}};
  if (rule.service_args.is_object() && rule.service_args.value("pd_disagg_mode", false))
    out["stagesFrom"] =
        rule.service_args.contains("pdLadder") && rule.service_args["pdLadder"].is_array()
            ? "pdLadder"
            : "pd_disagg_mode";
  withAdmission(out, rule, env);
  auto has = [&](std::string_view n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  if (has(stageForTier(Ladder::kTier15).name)) {
    const KvExactOptions o = kvExactOptions(rule, env);
    const auto& sa = rule.service_args;
    const bool from_rule = sa.contains("kvLbMode") && sa["kvLbMode"].is_string();
    out["kvBlockSize"] = o.block_size;
    if (o.profile) {
      // A scoring profile replaces the law: its parts with every default filled in (a valid
      // kvScoringProfile value as it stands), the built-in it came from, and only the knobs that
      // still apply (the miss guards only when misses fall through, cold-start seeding when on).
      const auto& spec = o.profile->spec();
      out["kvScoringProfile"] = spec.toJson();
      if (!spec.builtin.empty()) out["kvScoringProfileBuiltin"] = spec.builtin;
      if (!spec.score_misses) out["min_match_tokens"] = o.min_match_tokens;
      if (spec.cold_start_seeding) {
        out["coldstart_min_blocks"] = o.coldstart_min_blocks;
        out["coldstart_seed_nth"] = o.coldstart_seed_nth;
      }
      out["speculative_ttl_ms"] = o.speculative_ttl_ms;
      return withOthers(out, names, env);
    }
    out["kvLbMode"] = std::string(lawModeName(o.law.mode));
    out["kvLbModeFrom"] = from_rule ? "rule" : env.lb_mode ? "environment" : "default";
    if (const auto as_profile = lawAsProfile(o.law)) out["kvLbModeProfile"] = as_profile->toJson();
    out["mean_load_factor_pct"] = o.law.mean_load_factor_pct;
    out["ttft_miss_weight"] = o.law.ttft_miss_weight;
    out["ttft_load_blocks"] = o.law.ttft_load_blocks;
    out["sticky_tau_tokens"] = o.law.sticky_tau_tokens;
    out["predict_batch_offset"] = o.law.predict_batch_offset;
    out["predict_decode_weight_pct"] = o.law.predict_decode_weight_pct;
    out["spill_relief"] = o.law.spill_relief;
    out["min_match_tokens"] = o.min_match_tokens;
    out["speculative_ttl_ms"] = o.speculative_ttl_ms;
    out["coldstart_min_blocks"] = o.coldstart_min_blocks;
    out["coldstart_seed_nth"] = o.coldstart_seed_nth;
  }
  return withOthers(out, names, env);
}

}  // namespace kvgate::routing
