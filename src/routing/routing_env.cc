#include "routing/routing_env.h"

#include <cstdlib>
#include <string_view>

#include "common/env.h"
#include "routing/stages/prefix_trie.h"
#include "routing/stages/session_table.h"

namespace kvgate::routing {
namespace {

struct Reader {
  const EnvLookup& env;
  std::vector<std::string>& warnings;

  int64_t integer(const char* name, int64_t lo, int64_t hi, int64_t dflt) const {
    std::string why;
    const auto x = common::parseEnvInt(name, env(name), lo, hi, why);
    if (!why.empty()) warnings.push_back(why + "; using " + std::to_string(dflt));
    return x.value_or(dflt);
  }
};

}  // namespace

RoutingEnv readRoutingEnv(const EnvLookup& env, std::vector<std::string>& warnings) {
  static_assert(RoutingEnv{}.trie_max_nodes == PrefixTrie::kDefaultMaxNodes);
  static_assert(RoutingEnv{}.session_max == SessionTable::kDefaultMaxEntries);
  const Reader r{env, warnings};
  RoutingEnv e;
  e.law.mean_load_factor_pct =
      static_cast<uint32_t>(r.integer("LOXILB_KV_MEAN_LOAD_FACTOR", 100, 300, 175));
  e.law.ttft_miss_weight =
      static_cast<double>(r.integer("LOXILB_KV_TTFT_MISS_WEIGHT_PCT", 0, 10'000, 800)) / 100.0;
  e.law.ttft_load_blocks =
      static_cast<double>(r.integer("LOXILB_KV_TTFT_LOAD_BLOCKS", 0, 1'000'000, 2));
  e.law.predict_batch_offset =
      static_cast<uint32_t>(r.integer("LOXILB_KV_PREDICT_BATCH_OFFSET", 1, 64, 1));
  e.law.predict_decode_weight_pct =
      static_cast<uint32_t>(r.integer("LOXILB_KV_PREDICT_DECODE_WEIGHT_PCT", 0, 100, 50));
  e.law.sticky_tau_tokens = static_cast<uint64_t>(
      r.integer("LOXILB_KV_STICKY_TAU_TOKENS", 1, 1'000'000'000, 286'720));
  if (const char* v = env("LOXILB_KV_SPILL_RELIEF"); v && *v) {
    const std::string_view s(v);
    if (s == "off" || s == "0" || s == "false")
      e.spill_relief = false;
    else if (s == "on" || s == "1" || s == "true")
      e.spill_relief = true;
    else {  // (as before RoutingEnv: a value that is set but unreadable leaves relief on, P/D too)
      e.spill_relief = true;
      warnings.push_back("ignoring LOXILB_KV_SPILL_RELIEF='" + std::string(s) +
                         "' (not on/off/1/0/true/false): spill relief stays on");
    }
  }
  if (const char* v = env("LOXILB_KV_LB_MODE"); v && *v) {
    e.lb_mode = parseLawMode(v);
    if (!e.lb_mode)
      warnings.push_back(std::string("ignoring LOXILB_KV_LB_MODE='") + v +
                         "' (not a selection law: off, hard, soft, adaptive, adaptive-soft, "
                         "taper, ttft, predict, predict-q, lmetric, dynamo, dynamo-v1, llm-d, "
                         "llm-d-sticky): using the "
                         "default (predict-q on kvExactMode 3 rules, predict on P/D rules)");
  }
  e.min_match_tokens = static_cast<uint32_t>(r.integer("LLB_KV_MIN_MATCH_TOKENS", 0, 4096, 16));
  e.speculative_ttl_ms =
      static_cast<uint32_t>(r.integer("LOXILB_KV_SPECULATIVE_TTL_MS", 0, 600'000, 2000));
  e.coldstart_min_blocks =
      static_cast<uint32_t>(r.integer("LOXILB_KV_COLDSTART_MIN_BLOCKS", 0, 1'000'000'000, 16));
  e.coldstart_seed_nth =
      static_cast<uint32_t>(r.integer("LOXILB_KV_COLDSTART_SEED_Nth", 0, 1'000'000, 16));
  e.trie_max_nodes = static_cast<size_t>(r.integer(
      "LOXILB_PD_TRIE_MAX_NODES", 16, 100'000'000, static_cast<int64_t>(e.trie_max_nodes)));
  e.session_max = static_cast<size_t>(r.integer(
      "LOXILB_PD_SESSION_MAX", 1, 100'000'000, static_cast<int64_t>(e.session_max)));
  e.lc_light_below_x100 = r.integer("LOXILB_LC_LIGHT_BELOW", 0, 100'000, 400);
  e.admission = config::readAdmissionEnv(env, warnings);
  return e;
}

const RoutingEnv& defaultRoutingEnv() {
  static const RoutingEnv k{};
  return k;
}

}  // namespace kvgate::routing
