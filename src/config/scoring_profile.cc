#include "config/scoring_profile.h"

#include <cmath>
#include <optional>
#include <set>

namespace kvgate::config {
namespace {
using nlohmann::json;

tl::unexpected<Error> bad(const std::string& field, const std::string& what) {
  return fail(400, field, "invalid " + field + ": " + what);
}

std::string fmt(double x) {
  std::string s = std::to_string(x);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

const ScoringPartInfo* findInfo(const std::vector<ScoringPartInfo>& t, std::string_view n) {
  for (const auto& i : t)
    if (i.name == n) return &i;
  return nullptr;
}

std::string namesOf(const std::vector<ScoringPartInfo>& t) {
  std::string s;
  for (const auto& i : t) s += (s.empty() ? "" : "|") + std::string(i.name);
  return s;
}

// One entry of "filters" or "scorers".
Result<ScoringPart> parsePart(const json& e, const std::string& path,
                              const std::vector<ScoringPartInfo>& table, bool scorer) {
  if (!e.is_object()) return bad(path, "must be an object with a \"name\"");
  auto n = e.find("name");
  if (n == e.end() || !n->is_string()) return bad(path + ".name", "is required (a string)");
  const ScoringPartInfo* info = findInfo(table, n->get_ref<const std::string&>());
  if (!info)
    return bad(path + ".name", "unknown " + std::string(scorer ? "scorer" : "filter") + " '" +
                                   n->get<std::string>().substr(0, 64) + "' (one of " +
                                   namesOf(table) + ")");
  ScoringPart p;
  p.name = std::string(info->name);
  for (const auto& prm : info->params) p.params[std::string(prm.name)] = prm.def;
  for (const auto& [k, v] : e.items()) {
    if (k == "name") continue;
    if (k == "weight" && scorer) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 ||
          v.get<double>() > 1000)
        return bad(path + ".weight", "must be a number in 0..1000");
      p.weight = v.get<double>();
      continue;
    }
    const ScoringParam* prm = nullptr;
    for (const auto& x : info->params)
      if (x.name == k) prm = &x;
    if (!prm) return bad(path + "." + k.substr(0, 64), "unknown parameter of " + p.name);
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < prm->min ||
        v.get<double>() > prm->max)
      return bad(path + "." + k, "must be a number in " + fmt(prm->min) + ".." + fmt(prm->max));
    if (prm->integer && v.get<double>() != std::floor(v.get<double>()))
      return bad(path + "." + k,
                 "must be a whole number in " + fmt(prm->min) + ".." + fmt(prm->max));
    p.params[k] = v.get<double>();
  }
  return p;
}

Result<std::vector<ScoringPart>> parseParts(const json& o, const char* key, const std::string& path,
                                            const std::vector<ScoringPartInfo>& table,
                                            bool scorer) {
  std::vector<ScoringPart> out;
  auto it = o.find(key);
  if (it == o.end()) return out;
  const std::string p = path + "." + key;
  if (!it->is_array() || it->size() > kMaxScoringParts)
    return bad(p, "must be an array of at most " + std::to_string(kMaxScoringParts) + " entries");
  std::set<std::string> seen;
  for (size_t i = 0; i < it->size(); ++i) {
    auto part = parsePart((*it)[i], p + "[" + std::to_string(i) + "]", table, scorer);
    if (!part) return tl::unexpected(part.error());
    if (!seen.insert(part->name).second)
      return bad(p + "[" + std::to_string(i) + "]", "'" + part->name + "' is listed twice");
    out.push_back(std::move(*part));
  }
  return out;
}

ScoringPart part(const char* name, double weight, std::map<std::string, double> params = {}) {
  ScoringPart p{name, weight, std::move(params)};
  // Defaults for what the built-in leaves out.
  for (const auto* t : {&scorerInfos(), &filterInfos()})
    if (const auto* info = findInfo(*t, name))
      for (const auto& prm : info->params) p.params.emplace(std::string(prm.name), prm.def);
  return p;
}

std::optional<ScoringProfileSpec> builtin(std::string_view name) {
  ScoringProfileSpec s;
  s.builtin = std::string(name);
  if (name == "llm-d") {  // llm-d's older default profile (the llm-d law's weights)
    s.scorers = {part("queue", 2), part("kv_utilization", 2), part("prefix_minmax", 3)};
  } else if (name == "llm-d-sticky") {  // llm-d's current default: sticky until saturated
    // (llm-d's tau is a constant calibrated per hardware: its example's 286,720 tokens; a custom
    // profile's tauSeconds derives it from the prefill rate measured online instead)
    s.filters = {part("prefix_affinity", 1)};
    s.scorers = {part("token_load", 1)};
  } else if (name == "predict") {  // the predict law (misses to the rule's selector)
    s.scorers = {part("predict", 1)};
    s.score_misses = false;
    s.cold_start_seeding = true;
  } else if (name == "predict-q") {  // the default law: predict, misses to the least queued (then
                                     // least recently picked)
    s.scorers = {part("predict_q", 1)};
    s.cold_start_seeding = true;  // (as the law: on hits)
  } else if (name == "hard" || name == "adaptive" || name == "taper") {
    // The seed's bounded-load laws with spill relief (single-pool rules' default): the most
    // affine candidate under its cap; misses to the rule's selector, cold-start seeding on.
    s.filters = {part("bounded_load", 1,
                      {{"shape", name == "hard"       ? 0.0
                                 : name == "adaptive" ? 1.0
                                                      : 2.0}})};
    s.scorers = {part("prefix", 1)};
    s.score_misses = false;
    s.cold_start_seeding = true;
  } else {
    return std::nullopt;
  }
  return s;
}

}  // namespace

const std::vector<ScoringPartInfo>& scorerInfos() {
  // (routing/scoring/registry.cc registers one scorer for each; a test checks both lists agree)
  static const std::vector<ScoringPartInfo> k = {
      {"prefix", {}},
      {"prefix_minmax", {}},
      {"queue", {}},
      {"kv_utilization", {}},
      {"load", {}},
      {"token_load", {}},
      {"predict",
       {{"decodeWeight", 0, 1, 0.5},
        {"batchOffset", 1, 64, 1, true},
        {"capacityShare", 0, 1, 1, true}}},
      {"predict_q",
       {{"decodeWeight", 0, 1, 0.5},
        {"batchOffset", 1, 64, 1, true},
        {"capacityShare", 0, 1, 1, true}}},
      {"soft_cost", {{"lambda", 0, 1e6, 32}, {"adaptive", 0, 1, 0, true}}},
      {"ttft_cost", {{"missWeightPct", 0, 10000, 800}, {"loadBlocks", 0, 1e6, 2}}},
      {"dynamo_cost", {}, true},
      {"dynamo_v1_cost", {}, true},
  };
  return k;
}

const std::vector<ScoringPartInfo>& filterInfos() {
  static const std::vector<ScoringPartInfo> k = {
      {"prefix_affinity",
       {{"threshold", 0, 1, 0.8}, {"tauTokens", 0, 1e12, 286720}, {"tauSeconds", 0, 3600, 0}}},
      {"kv_usage_below", {{"threshold", 0, 1, 0.95}}},
      // shape: 0 fixed (the hard law), 1 the seed's adaptive law, 2 taper
      {"bounded_load", {{"factorPct", 100, 300, 175}, {"shape", 0, 2, 0, true}}},
  };
  return k;
}

const std::vector<std::string_view>& builtinProfileNames() {
  static const std::vector<std::string_view> k = {"llm-d", "llm-d-sticky", "predict", "predict-q",
                                                  "hard",  "adaptive",     "taper"};
  return k;
}

double ScoringPart::param(const std::string& k) const {
  if (auto it = params.find(k); it != params.end()) return it->second;
  for (const auto* t : {&scorerInfos(), &filterInfos()})
    if (const auto* info = findInfo(*t, name))
      for (const auto& prm : info->params)
        if (prm.name == k) return prm.def;
  return 0;
}

bool ScoringProfileSpec::readsActive() const {
  for (const auto& p : scorers)
    if (const auto* i = findInfo(scorerInfos(), p.name); i && i->reads_active) return true;
  return false;
}

json ScoringProfileSpec::toJson() const {
  auto parts = [](const std::vector<ScoringPart>& v, bool scorer) {
    json a = json::array();
    for (const auto& p : v) {
      json o = {{"name", p.name}};
      if (scorer) o["weight"] = p.weight;
      for (const auto& [k, x] : p.params) o[k] = x;
      a.push_back(o);
    }
    return a;
  };
  json out = {{"filters", parts(filters, false)},
              {"scorers", parts(scorers, true)},
              {"picker", picker == Picker::kRandom ? "random" : "max"},
              {"onMiss", score_misses ? "score" : "selector"},
              {"coldStartSeeding", cold_start_seeding}};
  return out;
}

Result<ScoringProfileSpec> parseScoringProfile(const json& v, const std::string& path) {
  if (v.is_string()) {
    const auto& name = v.get_ref<const std::string&>();
    if (auto s = builtin(name)) return *s;
    std::string all;
    for (auto n : builtinProfileNames()) all += (all.empty() ? "" : "|") + std::string(n);
    return bad(path, "unknown built-in profile '" + name.substr(0, 64) + "' (one of " + all +
                         ", or an object)");
  }
  if (!v.is_object()) return bad(path, "must be a built-in profile's name or an object");
  for (const auto& [k, x] : v.items())
    if (k != "filters" && k != "scorers" && k != "picker" && k != "onMiss" &&
        k != "coldStartSeeding")
      return bad(path + "." + k.substr(0, 64),
                 "unknown field (filters, scorers, picker, onMiss, coldStartSeeding)");
  ScoringProfileSpec s;
  auto filters = parseParts(v, "filters", path, filterInfos(), false);
  if (!filters) return tl::unexpected(filters.error());
  auto scorers = parseParts(v, "scorers", path, scorerInfos(), true);
  if (!scorers) return tl::unexpected(scorers.error());
  s.filters = std::move(*filters);
  s.scorers = std::move(*scorers);
  if (s.scorers.empty()) return bad(path + ".scorers", "at least one scorer is required");
  double total = 0;
  for (const auto& p : s.scorers) total += p.weight;
  if (total <= 0) return bad(path + ".scorers", "the weights must not all be 0");
  if (auto p = v.find("picker"); p != v.end()) {
    if (*p == "max") s.picker = ScoringProfileSpec::Picker::kMax;
    else if (*p == "random") s.picker = ScoringProfileSpec::Picker::kRandom;
    else return bad(path + ".picker", "must be max or random");
  }
  if (auto m = v.find("onMiss"); m != v.end()) {
    if (*m == "score") s.score_misses = true;
    else if (*m == "selector") s.score_misses = false;
    else return bad(path + ".onMiss", "must be score or selector");
  }
  s.cold_start_seeding = !s.score_misses;
  if (auto c = v.find("coldStartSeeding"); c != v.end()) {
    if (!c->is_boolean()) return bad(path + ".coldStartSeeding", "must be true or false");
    s.cold_start_seeding = c->get<bool>();
  }
  return s;
}

}  // namespace kvgate::config
