#include "bench/fleet/workload.h"

#include <cmath>

namespace kvgate::bench::fleet {
namespace {

struct Rng {  // splitmix64
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
};

// Token ids away from the special-token range of common vocabularies.
void randomTokens(Rng& r, size_t n, std::vector<uint32_t>& out) {
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<uint32_t>(1000 + r.next() % 29000));
}

bool take(std::map<std::string, double>& o, const std::map<std::string, double>& defaults,
          nlohmann::ordered_json& params, std::string& err, std::map<std::string, int64_t>& v) {
  for (const auto& [k, d] : defaults) {
    double x = d;
    if (auto it = o.find(k); it != o.end()) {
      x = it->second;
      o.erase(it);
    }
    if (x < 0 || x > 1e7 || x != std::floor(x)) {
      err = "workload parameter " + k + " must be a whole number in 0..10000000";
      return false;
    }
    v[k] = static_cast<int64_t>(x);
    params[k] = v[k];
  }
  if (!o.empty()) {
    err = "unknown workload parameter " + o.begin()->first;
    return false;
  }
  return true;
}

// Groups sharing a system prompt, each prompt its own question (gsp and llmd).
void sharedPrefix(Rng& r, int64_t groups, int64_t per_group, int64_t sys, int64_t q, int64_t out,
                  Workload& w) {
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<uint32_t> system;
    randomTokens(r, static_cast<size_t>(sys), system);
    for (int64_t i = 0; i < per_group; ++i) {
      Prompt p;
      p.tokens = system;
      randomTokens(r, static_cast<size_t>(q), p.tokens);
      p.output_len = static_cast<int>(out);
      p.group = static_cast<uint32_t>(g);
      w.prompts.push_back(std::move(p));
    }
  }
  w.working_set_tokens = static_cast<uint64_t>(groups * sys + groups * per_group * q);
  const double total = static_cast<double>(sys + q);
  w.ideal_hit = per_group > 0 && total > 0
                    ? (static_cast<double>(per_group - 1) / static_cast<double>(per_group)) *
                          (static_cast<double>(sys) / total)
                    : 0;
}

}  // namespace

bool makeWorkload(const std::string& name, const std::map<std::string, double>& overrides,
                  uint64_t seed, size_t requests, Workload& w, std::string& err) {
  w = Workload{};
  w.name = name;
  Rng r{seed ^ 0x6b76676174652d77ULL};
  std::map<std::string, double> o = overrides;
  std::map<std::string, int64_t> v;
  if (name == "gsp") {
    if (!take(o,
              {{"num_groups", 64},
               {"prompts_per_group", 16},
               {"system_prompt_len", 2048},
               {"question_len", 128},
               {"output_len", 256}},
              w.params, err, v))
      return false;
    sharedPrefix(r, v["num_groups"], v["prompts_per_group"], v["system_prompt_len"],
                 v["question_len"], v["output_len"], w);
  } else if (name == "llmd") {
    if (!take(o,
              {{"num_groups", 150},
               {"prompts_per_group", 5},
               {"system_prompt_len", 6000},
               {"question_len", 1200},
               {"output_len", 1000}},
              w.params, err, v))
      return false;
    sharedPrefix(r, v["num_groups"], v["prompts_per_group"], v["system_prompt_len"],
                 v["question_len"], v["output_len"], w);
  } else if (name == "nosharing") {
    if (!take(o, {{"input_len", 1024}, {"output_len", 128}}, w.params, err, v)) return false;
    for (size_t i = 0; i < requests; ++i) {
      Prompt p;
      randomTokens(r, static_cast<size_t>(v["input_len"]), p.tokens);
      p.output_len = static_cast<int>(v["output_len"]);
      p.group = static_cast<uint32_t>(i);
      w.prompts.push_back(std::move(p));
    }
    w.with_replacement = false;
    w.working_set_tokens = static_cast<uint64_t>(v["input_len"]) * requests;
    w.ideal_hit = 0;
  } else {
    err = "unknown workload " + name + " (gsp, llmd, nosharing)";
    return false;
  }
  if (w.prompts.empty()) {
    err = "workload " + name + " has no prompts with these parameters";
    return false;
  }
  for (const auto& p : w.prompts)
    if (p.tokens.empty() || p.output_len < 1) {
      err = "workload " + name + ": prompts and outputs need at least one token";
      return false;
    }
  return true;
}

std::vector<size_t> drawOrder(const Workload& w, size_t n, uint64_t seed) {
  std::vector<size_t> order;
  order.reserve(n);
  Rng r{seed ^ 0x6472617721ULL};
  for (size_t i = 0; i < n; ++i)
    order.push_back(w.with_replacement ? static_cast<size_t>(r.next() % w.prompts.size())
                                       : i % w.prompts.size());
  return order;
}

std::vector<double> poissonArrivals(size_t n, double qps, uint64_t seed) {
  std::vector<double> at;
  at.reserve(n);
  Rng r{seed ^ 0x706f6973736f6eULL};
  double t = 0;
  for (size_t i = 0; i < n; ++i) {
    at.push_back(t);
    t += -std::log(r.uniform()) * 1000.0 / qps;
  }
  return at;
}

}  // namespace kvgate::bench::fleet
