// `kvScoringProfile` (extension field of a Tier 1.5 rule, kvExactMode 1 or 3): the rule's scoring
// profile, as data. routing/scoring/ builds and runs it; this file only says what a valid one is.
//
// The field is either the name of a built-in profile (a string) or an object:
//   {"filters": [{"name": "prefix_affinity", "threshold": 0.8, "tauTokens": 286720}],
//    "scorers": [{"name": "token_load", "weight": 1}],
//    "picker": "max",          // max (default) | random (weighted by score)
//    "onMiss": "score",
//    "coldStartSeeding": false}
// onMiss: score (default): the profile places prompts nobody holds too; selector: they fall
// through to the rule's selector (a Tier 1.5 miss). coldStartSeeding: divert every Nth hit to an
// endpoint caching almost nothing (LOXILB_KV_COLDSTART_*; the filters do not apply to that
// diversion); default on with onMiss selector, off with score.
// Filters drop candidates (a filter that would drop all keeps all); each scorer scores the
// candidates left in [0, 1], higher is better; the picker takes the weighted sum. Names and
// parameters are those of kScorers / kFilters below; anything else is a 400 naming the culprit.
// Built-in profiles (kBuiltinProfiles): "llm-d" (queue 2, kv_utilization 2, prefix_minmax 3),
// "llm-d-sticky" (prefix_affinity 0.8 / 286,720 tokens, then token_load), "predict" (the predict
// scorer with onMiss selector: the predict law as a profile), "predict-q" (the predict_q scorer,
// onMiss score, cold-start seeding on: the default law of kvExactMode 3 rules as a profile).
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace kvgate::config {

// A parameter a filter or scorer takes: its name, range and default.
struct ScoringParam {
  std::string_view name;
  double min, max, def;
  bool integer = false;  // whole numbers only
};
// A filter or scorer this build knows, with its parameters.
struct ScoringPartInfo {
  std::string_view name;
  std::vector<ScoringParam> params;
  // It reads the distinct blocks in flight per endpoint (the dynamo laws' active set): a rule
  // naming it has the data plane track each request's chain on its endpoint.
  bool reads_active = false;
};
const std::vector<ScoringPartInfo>& scorerInfos();
const std::vector<ScoringPartInfo>& filterInfos();

// One filter or scorer of a profile, every parameter filled (defaults included).
struct ScoringPart {
  std::string name;
  double weight = 1;  // scorers: 0..1000
  std::map<std::string, double> params;
  // The parameter's value, else its registered default (scorerInfos / filterInfos), else 0.
  double param(const std::string& k) const;
};

struct ScoringProfileSpec {
  std::string builtin;  // the built-in's name, when the field named one
  std::vector<ScoringPart> filters;
  std::vector<ScoringPart> scorers;
  enum class Picker : uint8_t { kMax, kRandom } picker = Picker::kMax;
  bool score_misses = true;  // onMiss "score"
  // coldStartSeeding: every Nth hit may go to an endpoint caching almost nothing (kv_exact's
  // cold-start seeding, as under the seed's laws); unset in the field: !score_misses.
  bool cold_start_seeding = false;
  bool readsActive() const;  // a part reads the active blocks (ScoringPartInfo::reads_active)
  // The profile with every default spelled out, itself a valid field value (the rule's GET
  // "effective" block shows it, and the built-in's name beside it).
  nlohmann::json toJson() const;
};

inline constexpr size_t kMaxScoringParts = 8;  // filters, and scorers, per profile
const std::vector<std::string_view>& builtinProfileNames();

// The field's value -> a profile; a 400 naming the offending part otherwise. `path` prefixes
// the error's field ("serviceArguments.kvScoringProfile").
Result<ScoringProfileSpec> parseScoringProfile(const nlohmann::json& v, const std::string& path);

}  // namespace kvgate::config
