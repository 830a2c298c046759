#include "routing/routing_env.h"

#include <gtest/gtest.h>

#include <map>

#include "../../tests/support/routing_env.h"
#include "routing/rule_profile.h"

namespace kvgate::routing {
namespace {

RoutingEnv read(const std::map<std::string, std::string>& vars, std::vector<std::string>& warnings) {
  return testing::envOf(vars, &warnings);
}

TEST(RoutingEnv, EmptyEnvironmentIsEveryDocumentedDefault) {
  std::vector<std::string> w;
  const RoutingEnv e = read({}, w);
  EXPECT_TRUE(w.empty());
  // The defaults documented in routing_env.h and docs/configuration.md.
  EXPECT_EQ(e.law.mean_load_factor_pct, 175u);
  EXPECT_DOUBLE_EQ(e.law.ttft_miss_weight, 8.0);
  EXPECT_DOUBLE_EQ(e.law.ttft_load_blocks, 2.0);
  EXPECT_EQ(e.law.sticky_tau_tokens, 286'720u);
  EXPECT_EQ(e.law.predict_batch_offset, 1u);
  EXPECT_EQ(e.law.predict_decode_weight_pct, 50u);  // (the law's own default, 100, is neutral)
  EXPECT_FALSE(e.lb_mode.has_value());
  EXPECT_FALSE(e.spill_relief.has_value());
  EXPECT_EQ(e.min_match_tokens, 16u);
  EXPECT_EQ(e.speculative_ttl_ms, 2000u);
  EXPECT_EQ(e.coldstart_min_blocks, 16u);
  EXPECT_EQ(e.coldstart_seed_nth, 16u);
  EXPECT_EQ(e.trie_max_nodes, 262'144u);
  EXPECT_EQ(e.session_max, 100'000u);
  EXPECT_EQ(e.lc_light_below_x100, 400);
}

TEST(RoutingEnv, ValuesInRangeAreTakenOthersWarnedAndIgnored) {
  std::vector<std::string> w;
  const RoutingEnv e = read({{"LOXILB_KV_MEAN_LOAD_FACTOR", "150"},
                             {"LOXILB_KV_TTFT_MISS_WEIGHT_PCT", "250"},
                             {"LOXILB_KV_LB_MODE", "llm-d-sticky"},
                             {"LOXILB_KV_SPILL_RELIEF", "off"},
                             {"LOXILB_PD_TRIE_MAX_NODES", "15"},       // below 16
                             {"LLB_KV_MIN_MATCH_TOKENS", "12abc"},     // not a number
                             {"LOXILB_LC_LIGHT_BELOW", "0"}},
                            w);
  EXPECT_EQ(e.law.mean_load_factor_pct, 150u);
  EXPECT_DOUBLE_EQ(e.law.ttft_miss_weight, 2.5);
  EXPECT_EQ(e.lb_mode, LawMode::kLlmdSticky);
  EXPECT_EQ(e.spill_relief, false);
  EXPECT_EQ(e.trie_max_nodes, 262'144u);
  EXPECT_EQ(e.min_match_tokens, 16u);
  EXPECT_EQ(e.lc_light_below_x100, 0);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], "ignoring LLB_KV_MIN_MATCH_TOKENS='12abc' (not 0..4096); using 16");
  EXPECT_EQ(w[1], "ignoring LOXILB_PD_TRIE_MAX_NODES='15' (not 16..100000000); using 262144");
}

TEST(RoutingEnv, UnknownLawAndSpillValuesWarn) {
  std::vector<std::string> w;
  const RoutingEnv e = read({{"LOXILB_KV_LB_MODE", "fastest"}, {"LOXILB_KV_SPILL_RELIEF", "maybe"}}, w);
  EXPECT_FALSE(e.lb_mode.has_value());
  EXPECT_EQ(e.spill_relief, true);  // set but unreadable: on, for P/D rules too (as before)
  EXPECT_EQ(w.size(), 2u);
}

TEST(RuleProfile, EffectiveBlockNamesStagesAndWhereTheLawCameFrom) {
  std::vector<std::string> w;
  config::RuleSpec r;
  r.sel = 0;
  r.service_args = {{"kvExactMode", 3}, {"kvBlockSize", 32}};
  const RoutingEnv soft = read({{"LOXILB_KV_LB_MODE", "soft"}, {"LOXILB_KV_MEAN_LOAD_FACTOR", "200"}}, w);
  auto j = effectiveRouting(r, soft);
  EXPECT_EQ(j["stages"], nlohmann::json::array({"kv_exact", "rr"}));
  EXPECT_EQ(j["kvLbMode"], "soft");
  EXPECT_EQ(j["kvLbModeFrom"], "environment");
  EXPECT_EQ(j["mean_load_factor_pct"], 200);
  EXPECT_EQ(j["kvBlockSize"], 32);
  EXPECT_EQ(j["spill_relief"], true);
  r.service_args["kvLbMode"] = "ttft";
  j = effectiveRouting(r, soft);
  EXPECT_EQ(j["kvLbMode"], "ttft");
  EXPECT_EQ(j["kvLbModeFrom"], "rule");
  r.service_args.erase("kvLbMode");
  j = effectiveRouting(r, defaultRoutingEnv());  // no rule field, no environment: the default
  EXPECT_EQ(j["kvLbMode"], "predict-q");
  EXPECT_EQ(j["kvLbModeFrom"], "default");
  w.clear();
  j = effectiveRouting(r, read({{"LOXILB_KV_LB_MODE", "bogus"}}, w));  // garbage: the default too
  EXPECT_EQ(j["kvLbMode"], "predict-q");
  ASSERT_EQ(w.size(), 1u);
  config::RuleSpec plain;  // sel 0, nothing else
  plain.service_args = nlohmann::json::object();
  j = effectiveRouting(plain, defaultRoutingEnv());
  EXPECT_EQ(j,
            nlohmann::json({{"stages", {"rr"}}, {"candidateFilters", {"healthy", "controller"}}}));
  config::RuleSpec pd;
  pd.service_args = {{"pd_disagg_mode", true}, {"pd_cache_aware_mode", true}};
  j = effectiveRouting(pd, defaultRoutingEnv());
  EXPECT_EQ(j["stages"], nlohmann::json::array({"session", "prefix_trie", "min_load"}));
  EXPECT_EQ(j["session_max"], 100'000);
  EXPECT_EQ(j["trie_max_nodes"], 262'144);
  EXPECT_FALSE(j.contains("kvLbMode"));
  EXPECT_EQ(j["stagesFrom"], "pd_disagg_mode");
  // pdLadder replaces the ladder the flags derive, in its order; only its stages' knobs show.
  pd.service_args["pd_cache_aware_mode"] = false;
  pd.service_args["pdLadder"] = {"prefix_trie", "min_load"};
  EXPECT_EQ(stageNames(pd), (std::vector<std::string>{"prefix_trie", "min_load"}));
  j = effectiveRouting(pd, defaultRoutingEnv());
  EXPECT_EQ(j["stages"], nlohmann::json::array({"prefix_trie", "min_load"}));
  EXPECT_EQ(j["stagesFrom"], "pdLadder");
  EXPECT_FALSE(j.contains("session_max"));
  EXPECT_EQ(j["trie_max_nodes"], 262'144);
  EXPECT_FALSE(effectiveRouting(plain, defaultRoutingEnv()).contains("stagesFrom"));
}

}  // namespace
}  // namespace kvgate::routing
