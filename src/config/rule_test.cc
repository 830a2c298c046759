#include "config/rule.h"

#include <gtest/gtest.h>

namespace kvgate::config {
namespace {
using nlohmann::json;

// The seed document's two examples with loopback addresses substituted.
json seedPd() {
  return json::parse(R"({
  "serviceArguments": {"externalIP": "127.0.0.1", "port": 2020, "protocol": "tcp", "sel": 0,
    "mode": 4, "host": "127.0.0.1", "pd_disagg_mode": true, "pd_cache_aware_mode": true,
    "kvExactMode": 1, "kvZmqPort": 5557, "kvHashAlgo": "sha256_cbor", "kvBlockSize": 16},
  "endpoints": [
    {"endpointIP": "127.0.0.2", "targetPort": 8100, "weight": 1, "ep_role": 1, "nixl_port": 5600},
    {"endpointIP": "127.0.0.3", "targetPort": 8200, "weight": 1, "ep_role": 2, "nixl_port": 5600}]})");
}
json seedChwbl() {
  return json::parse(R"({
  "serviceArguments": {"externalIP": "127.0.0.1", "port": 2021, "protocol": "tcp", "sel": 8,
    "mode": 4, "host": "127.0.0.1"},
  "endpoints": [{"endpointIP": "127.0.0.2", "targetPort": 8000, "weight": 1},
                {"endpointIP": "127.0.0.3", "targetPort": 8000, "weight": 1}]})");
}
json simple() {
  return json::parse(R"({"serviceArguments": {"externalIP": "127.0.0.1", "port": 8080,
    "protocol": "tcp", "mode": 4, "sel": 0, "model_name": "llama"},
    "endpoints": [{"endpointIP": "127.0.0.1", "targetPort": 9000, "weight": 2}]})");
}

TEST(RuleParse, SeedExamplesAreAcceptedAndMarkInactiveCapabilities) {
  auto pd = parseRule(seedPd());
  ASSERT_TRUE(pd) << pd.error().what;
  EXPECT_TRUE(pd->inactive_capability.empty());  // the seed P/D example serves traffic
  EXPECT_EQ(pd->endpoints.size(), 2u);
  EXPECT_EQ(pd->endpoints[0].role, 1);
  auto ch = parseRule(seedChwbl());
  ASSERT_TRUE(ch) << ch.error().what;
  EXPECT_TRUE(ch->inactive_capability.empty());  // CHWBL serves traffic
  EXPECT_EQ(ch->sel, 8);
}

TEST(RuleParse, ActiveRuleFieldsAndKey) {
  auto r = parseRule(simple());
  ASSERT_TRUE(r) << r.error().what;
  EXPECT_TRUE(r->inactive_capability.empty());
  EXPECT_EQ(r->model_name, "llama");
  EXPECT_EQ(r->endpoints[0].weight, 2);
  EXPECT_EQ(r->key(), "||disabled|model:llama|127.0.0.1:8080/tcp");
}

// HSTS: the header line as RFC 6797 §6.1 spells it (directive names case-insensitive, max-age in
// seconds); only on TLS rules. Store ids: stored, 501.
TEST(RuleParse, HstsHeaderAndStoreIds) {
  auto j = simple();
  j["serviceArguments"]["security"] = 1;
  j["serviceArguments"]["hsts_enable"] = true;
  auto r = parseRule(j);
  ASSERT_TRUE(r) << r.error().what;
  EXPECT_EQ(r->hsts_header, "Strict-Transport-Security: max-age=31536000\r\n");
  j["serviceArguments"]["hsts_max_age"] = 0;
  j["serviceArguments"]["hsts_include_subdomains"] = true;
  j["serviceArguments"]["hsts_preload"] = true;
  r = parseRule(j);
  ASSERT_TRUE(r) << r.error().what;
  EXPECT_EQ(r->hsts_header,
            "Strict-Transport-Security: max-age=0; includeSubDomains; preload\r\n");
  j["serviceArguments"]["hsts_enable"] = false;
  r = parseRule(j);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->hsts_header, "");
  // On a plain rule: stored, no header (browsers ignore HSTS over HTTP), still served.
  j["serviceArguments"]["hsts_enable"] = true;
  j["serviceArguments"]["security"] = 0;
  r = parseRule(j);
  ASSERT_TRUE(r) << r.error().what;
  EXPECT_EQ(r->hsts_header, "");
  EXPECT_EQ(r->inactive_capability, "");
  // Certificate ids matter for TLS to the engines only.
  auto k = simple();
  k["serviceArguments"]["backend_ca_cert_id"] = "ca-1";
  r = parseRule(k);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->inactive_capability, "");
  k["serviceArguments"]["security"] = 2;
  r = parseRule(k);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->inactive_capability, "certificate_store");
  // The same CA given as a path too: the id is redundant, the rule is served.
  k["serviceArguments"]["mtls_backend"] = {{"verify_server_cert", true},
                                           {"backend_ca_path", "/etc/ssl/certs/ca.pem"}};
  r = parseRule(k);
  ASSERT_TRUE(r) << r.error().what;
  EXPECT_EQ(r->inactive_capability, "");
  k = simple();
  k["serviceArguments"]["vip_qos_policy_id"] = "gold";
  EXPECT_EQ(parseRule(k)->inactive_capability, "");
}

struct BadCase {
  const char* name;
  const char* pointer;  // JSON pointer to set
  json value;
  const char* field;  // expected in the error's source
};

void PrintTo(const BadCase& b, std::ostream* os) { *os << b.name; }

class RuleRejects : public ::testing::TestWithParam<BadCase> {};

TEST_P(RuleRejects, With400NamingTheField) {
  json j = simple();
  const auto& c = GetParam();
  j[json::json_pointer(c.pointer)] = c.value;
  auto r = parseRule(j);
  ASSERT_FALSE(r) << c.name;
  EXPECT_EQ(r.error().code, 400) << c.name;
  EXPECT_NE(r.error().source.find(c.field), std::string::npos)
      << c.name << ": source=" << r.error().source << " what=" << r.error().what;
}

INSTANTIATE_TEST_SUITE_P(
    Config, RuleRejects,
    ::testing::Values(
        BadCase{"port_zero", "/serviceArguments/port", 0, "port"},
        BadCase{"port_big", "/serviceArguments/port", 70000, "port"},
        BadCase{"port_string", "/serviceArguments/port", "80", "port"},
        BadCase{"port_float", "/serviceArguments/port", 80.5, "port"},
        BadCase{"mode_0", "/serviceArguments/mode", 0, "mode"},
        BadCase{"mode_9", "/serviceArguments/mode", 9, "mode"},
        BadCase{"sel_5", "/serviceArguments/sel", 5, "sel"},
        BadCase{"sel_11", "/serviceArguments/sel", 11, "sel"},
        BadCase{"sel_negative", "/serviceArguments/sel", -1, "sel"},
        BadCase{"protocol_udp", "/serviceArguments/protocol", "udp", "protocol"},
        BadCase{"protocol_junk", "/serviceArguments/protocol", "http", "protocol"},
        BadCase{"vip_not_ip", "/serviceArguments/externalIP", "example.com", "externalIP"},
        BadCase{"vip_number", "/serviceArguments/externalIP", 5, "externalIP"},
        BadCase{"unknown_field", "/serviceArguments/selx", 1, "selx"},
        BadCase{"sse_not_bool", "/serviceArguments/sse_mode", "yes", "sse_mode"},
        BadCase{"threshold_range", "/serviceArguments/pd_cache_threshold", 101,
                "pd_cache_threshold"},
        BadCase{"chwbl_factor", "/serviceArguments/chwbl_mean_load_factor", 99,
                "chwbl_mean_load_factor"},
        BadCase{"kv_mode_2", "/serviceArguments/kvExactMode", 2, "kvExactMode"},
        BadCase{"kv_mode_1_no_pd", "/serviceArguments/kvExactMode", 1, "kvExactMode"},
        BadCase{"cache_aware_no_pd", "/serviceArguments/pd_cache_aware_mode", true,
                "pd_cache_aware_mode"},
        BadCase{"hash_algo", "/serviceArguments/kvHashAlgo", "sha256_sglang", "kvHashAlgo"},
        BadCase{"engine", "/serviceArguments/kvEngineType", "tgi", "kvEngineType"},
        BadCase{"lb_mode", "/serviceArguments/kvLbMode", "fast", "kvLbMode"},
        BadCase{"selector", "/serviceArguments/selector", "teleport", "selector"},
        BadCase{"api_mode", "/serviceArguments/kvExactApiMode", "embeddings", "kvExactApiMode"},
        BadCase{"api_key_auth", "/serviceArguments/api_key_auth", "maybe", "api_key_auth"},
        BadCase{"path_prefix", "/serviceArguments/path_prefix", "v1", "path_prefix"},
        BadCase{"path_prefix_escape", "/serviceArguments/path_prefix", "/v1/%63hat", "path_prefix"},
        BadCase{"path_prefix_slashes", "/serviceArguments/path_prefix", "/v1//chat", "path_prefix"},
        BadCase{"path_prefix_dots", "/serviceArguments/path_prefix", "/v1/../chat", "path_prefix"},
        BadCase{"path_prefix_query", "/serviceArguments/path_prefix", "/v1?x", "path_prefix"},
        BadCase{"host_chars", "/serviceArguments/host", "a b", "host"},
        BadCase{"model_long", "/serviceArguments/model_name", std::string(300, 'm'), "model_name"},
        BadCase{"ep_ip", "/endpoints/0/endpointIP", "nope", "endpoints[0].endpointIP"},
        BadCase{"ep_port", "/endpoints/0/targetPort", 0, "endpoints[0].targetPort"},
        BadCase{"ep_weight", "/endpoints/0/weight", 256, "endpoints[0].weight"},
        BadCase{"ep_role_no_pd", "/endpoints/0/ep_role", 1, "endpoints[0].ep_role"},
        BadCase{"ep_unknown", "/endpoints/0/bogus", 1, "endpoints[0].bogus"},
        BadCase{"ep_dup", "/endpoints/1",
                json::parse(R"({"endpointIP":"127.0.0.1","targetPort":9000,"weight":1})"),
                "endpoints[1]"},
        BadCase{"endpoints_obj", "/endpoints", json::object(), "endpoints"},
        BadCase{"annotations", "/serviceArguments/annotations", json::parse(R"({"a":1})"),
                "annotations"},
        BadCase{"session_query_empty", "/serviceArguments/session_header_name",
                "query:", "session_header_name"},
        BadCase{"session_cookie_empty", "/serviceArguments/session_header_name",
                "cookie:", "session_header_name"},
        BadCase{"session_bad_chars", "/serviceArguments/session_header_name", "a b",
                "session_header_name"}),
    [](const ::testing::TestParamInfo<BadCase>& i) { return std::string(i.param.name); });

TEST(RuleParse, MissingRequiredAndWrongShapes) {
  EXPECT_EQ(parseRule(json::array()).error().code, 400);
  EXPECT_EQ(parseRule(json::parse(R"({"endpoints":[]})")).error().source, "serviceArguments");
  json j = simple();
  j["serviceArguments"].erase("port");
  EXPECT_EQ(parseRule(j).error().source, "serviceArguments.port");
  j = simple();
  j["endpoints"][0].erase("weight");
  EXPECT_EQ(parseRule(j).error().source, "endpoints[0].weight");
  j = simple();
  j["extra"] = 1;
  EXPECT_EQ(parseRule(j).error().source, "extra");
  j = seedPd();
  j["endpoints"].erase(1);
  EXPECT_EQ(parseRule(j).error().source, "endpoints");
}

// kvScoringProfile (config/scoring_profile.h; its own tests in routing/scoring/scoring_test.cc):
// only on Tier 1.5 rules, not with kvLbMode, and a bad profile names its part.
// kvPoolingLb: auto, least_loaded or rule on single-leg rules; not on a P/D rule, which refuses
// pooling requests.
TEST(RuleParse, PoolingPlacementOnSingleLegRulesOnly) {
  json j = simple();
  for (const char* v : {"auto", "least_loaded", "rule"}) {
    j["serviceArguments"]["kvPoolingLb"] = v;
    EXPECT_TRUE(parseRule(j)) << v;
  }
  j["serviceArguments"]["kvPoolingLb"] = "nearest";
  auto r = parseRule(j);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().source, "serviceArguments.kvPoolingLb");
  json pd = seedPd();
  ASSERT_TRUE(parseRule(pd));
  pd["serviceArguments"]["kvPoolingLb"] = "auto";
  r = parseRule(pd);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, 400);
  EXPECT_EQ(r.error().source, "serviceArguments.kvPoolingLb");
  EXPECT_NE(r.error().what.find("single-leg"), std::string::npos);
}

TEST(RuleParse, ScoringProfileOnTier15RulesOnly) {
  json j = simple();
  j["serviceArguments"]["kvScoringProfile"] = "llm-d-sticky";
  auto r = parseRule(j);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().what.find("requires kvExactMode 1 or 3"), std::string::npos);
  j["serviceArguments"]["kvExactMode"] = 3;
  ASSERT_TRUE(parseRule(j)) << parseRule(j).error().what;
  j["serviceArguments"]["kvLbMode"] = "hard";
  r = parseRule(j);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().what.find("exclusive"), std::string::npos);
  j["serviceArguments"].erase("kvLbMode");
  j["serviceArguments"]["kvScoringProfile"] =
      json::parse(R"({"scorers":[{"name":"load","weight":2000}]})");
  r = parseRule(j);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, 400);
  EXPECT_EQ(r.error().source, "serviceArguments.kvScoringProfile.scorers[0].weight");
  j["serviceArguments"]["kvScoringProfile"] = std::string(70000, '{');  // oversized
  r = parseRule(j);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().what.find("too large"), std::string::npos);
  j["serviceArguments"]["kvScoringProfile"] =
      json::parse(R"({"scorers":[{"name":"prefix","weight":3},{"name":"load"}],"picker":"random"})");
  ASSERT_TRUE(parseRule(j));
  // P/D rules with Tier 1.5 (kvExactMode 1) take one too.
  json pd = seedPd();
  pd["serviceArguments"]["kvScoringProfile"] = "predict";
  EXPECT_TRUE(parseRule(pd));
  // ... one reading the queued prefill too (P/D prefill legs count it, proxy/pd_forward.cc).
  pd["serviceArguments"]["kvScoringProfile"] = "llm-d-sticky";
  EXPECT_TRUE(parseRule(pd));
}

// pdLadder: a P/D rule's prefill stages as data. Stages of the seed's ladder, each once, Tier 0
// first, min_load last, and never disagreeing with kvExactMode 1 or pd_cache_aware_mode.
TEST(RuleParse, PdLadderIsTheSeedsStagesInAnOrderThatPicks) {
  json pd = seedPd();  // (pd_cache_aware_mode and kvExactMode 1 set)
  pd["serviceArguments"]["pdLadder"] = {"session", "prefix_trie", "kv_exact", "min_load"};
  ASSERT_TRUE(parseRule(pd)) << parseRule(pd).error().what;
  pd["serviceArguments"]["pdLadder"] = {"kv_exact", "prefix_trie", "min_load"};  // no Tier 0
  EXPECT_TRUE(parseRule(pd));
  json plain = seedPd();
  plain["serviceArguments"].erase("pd_cache_aware_mode");
  plain["serviceArguments"].erase("kvExactMode");
  plain["serviceArguments"]["pdLadder"] = {"min_load"};
  EXPECT_TRUE(parseRule(plain));
  plain["serviceArguments"]["pdLadder"] = {"prefix_trie", "min_load"};  // asks for Tier 1 itself
  EXPECT_TRUE(parseRule(plain));
  json tuned = plain;  // the knobs of the stages listed
  tuned["serviceArguments"]["pdLadder"] = {"session", "prefix_trie", "min_load"};
  tuned["serviceArguments"]["pd_session_ttl_sec"] = 60;
  tuned["serviceArguments"]["pd_cache_threshold"] = 30;
  EXPECT_TRUE(parseRule(tuned));
  struct Case {
    json rule;
    json ladder;
    const char* says;
  };
  json single = simple();
  auto with = [](json j, const char* knob, int v) {
    j["serviceArguments"][knob] = v;
    return j;
  };
  const Case cases[] = {
      {single, {"min_load"}, "requires pd_disagg_mode"},
      {plain, json::array(), "must end with min_load"},
      {plain, {"session"}, "must end with min_load"},
      {plain, {"min_load", "session"}, "session (Tier 0) must come first"},
      {plain, {"prefix_trie", "session", "min_load"}, "session (Tier 0) must come first"},
      {plain, {"session", "session", "min_load"}, "'session' is listed twice"},
      {plain, {"session", "rr"}, "'rr' is not a P/D ladder stage"},
      {plain, {"session", "2", "min_load"}, "'2' is not a P/D ladder stage"},
      {plain, {"kv_exact", "min_load"}, "kv_exact requires kvExactMode 1"},
      {pd, {"prefix_trie", "min_load"}, "kvExactMode 1 asks for kv_exact"},
      {pd, {"session", "kv_exact", "min_load"}, "pd_cache_aware_mode asks for prefix_trie"},
      {plain, {"min_load", 3}, "must be an array of strings"},
      {with(plain, "pd_session_ttl_sec", 60),
       {"min_load"},
       "pd_session_ttl_sec tunes session, which the ladder leaves out"},
      {with(plain, "pd_cache_threshold", 30),
       {"session", "min_load"},
       "pd_cache_threshold tunes prefix_trie"},
      {with(plain, "pd_balance_abs_threshold", 2),
       {"min_load"},
       "pd_balance_abs_threshold tunes prefix_trie"},
      {plain, "min_load", "must be an array"},
      {plain, json(std::vector<std::string>(65, "min_load")), "at most 64"},
  };
  for (const auto& c : cases) {
    json j = c.rule;
    j["serviceArguments"]["pdLadder"] = c.ladder;
    auto r = parseRule(j);
    ASSERT_FALSE(r) << c.ladder.dump();
    EXPECT_EQ(r.error().code, 400);
    EXPECT_EQ(r.error().source, "serviceArguments.pdLadder") << c.ladder.dump();
    EXPECT_NE(r.error().what.find(c.says), std::string::npos) << r.error().what;
  }
  plain["serviceArguments"]["pdLadder"] = nullptr;  // null: not set (the flags' ladder)
  auto r = parseRule(plain);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->service_args.contains("pdLadder"));
}

TEST(RuleParse, ModeErrorMessageNamesTheMode) {
  json j = simple();
  j["serviceArguments"]["mode"] = 6;  // (upstream's old 6-aigw: gone)
  auto r = parseRule(j);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().source, "serviceArguments.mode");
}

TEST(RuleParse, DsrNeedsTheHashSelectorAndTheServicePort) {
  json j = simple();
  j["serviceArguments"].erase("model_name");
  j["serviceArguments"]["mode"] = 3;
  j["serviceArguments"]["sel"] = 0;
  auto r = parseRule(j);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().source, "serviceArguments.sel");
  // upstream's words (shared/reference/upstream-gateway.md)
  EXPECT_NE(r.error().what.find("Only Hash Selection criteria allowed for DSR mode"),
            std::string::npos)
      << r.error().what;
  j["serviceArguments"]["sel"] = 1;
  const int port = j["serviceArguments"]["port"].get<int>();
  j["endpoints"][0]["targetPort"] = port + 1;  // (a port DSR cannot translate)
  r = parseRule(j);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().source, "endpoints[0].targetPort");
  for (auto& e : j["endpoints"]) e["targetPort"] = port;
  r = parseRule(j);
  ASSERT_TRUE(r) << r.error().what;
  EXPECT_EQ(r->mode, 3);
}

TEST(RuleParse, OneArmAndFullNatAreL4Rules) {
  json j = simple();
  j["serviceArguments"].erase("model_name");
  for (int mode : {1, 2}) {
    j["serviceArguments"]["mode"] = mode;
    j["serviceArguments"]["sel"] = 2;
    auto r = parseRule(j);
    ASSERT_TRUE(r) << r.error().what;
    EXPECT_EQ(r->mode, mode);
    EXPECT_TRUE(isL4Mode(r->mode));
    // The same refusals as mode 0's, naming the mode.
    j["serviceArguments"]["sel"] = 8;
    r = parseRule(j);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().what.find(mode == 1 ? "mode 1 (one-arm)" : "mode 2 (full NAT)"),
              std::string::npos)
        << r.error().what;
    j["serviceArguments"]["sel"] = 0;
    json b = j;
    b["serviceArguments"]["sse_mode"] = true;
    r = parseRule(b);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().source, "serviceArguments.sse_mode");
  }
}

TEST(RuleParse, ModeZeroIsAnL4Rule) {
  json j = simple();
  j["serviceArguments"].erase("model_name");
  j["serviceArguments"]["mode"] = 0;
  j["serviceArguments"]["protocol"] = "udp";
  j["serviceArguments"]["sel"] = 1;
  auto r = parseRule(j);
  ASSERT_TRUE(r) << r.error().what;
  EXPECT_EQ(r->mode, 0);
  EXPECT_EQ(r->protocol, "udp");
  // persist and least connections are the L4 path's too (upstream's sel 3 and 4)
  for (int sel : {3, 4}) {
    j["serviceArguments"]["sel"] = sel;
    r = parseRule(j);
    ASSERT_TRUE(r) << sel << ": " << r.error().what;
    EXPECT_EQ(r->sel, sel);
  }
  // Selectors the L4 path has not: 400 naming them.
  for (int sel : {5, 8, 9, 10}) {
    j["serviceArguments"]["sel"] = sel;
    r = parseRule(j);
    ASSERT_FALSE(r) << sel;
    EXPECT_EQ(r.error().source, "serviceArguments.sel");
  }
  // persist pins by the client's address: a session header would be read from no request
  json sh = j;
  sh["serviceArguments"]["sel"] = 3;
  sh["serviceArguments"]["session_header_name"] = "x-session";
  r = parseRule(sh);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().source, "serviceArguments.session_header_name");
  // (with another selector the field was stored inert before sel 3 came to L4 rules: a state
  // file holding such a rule still loads)
  sh["serviceArguments"]["sel"] = 0;
  EXPECT_TRUE(parseRule(sh));
  // Fields that need a request read: refused, not stored inert.
  j["serviceArguments"]["sel"] = 0;
  for (const char* k : {"sse_mode"}) {
    json b = j;
    b["serviceArguments"][k] = true;
    r = parseRule(b);
    ASSERT_FALSE(r) << k;
    EXPECT_NE(r.error().what.find("mode 4"), std::string::npos) << r.error().what;
  }
  // The circuit breaker judges L4 endpoints too (by the TCP connects the program sees).
  json cb = j;
  cb["serviceArguments"]["cb_enable"] = true;
  cb["serviceArguments"]["protocol"] = "tcp";
  r = parseRule(cb);
  ASSERT_TRUE(r) << r.error().what;
  EXPECT_TRUE(r->cb_enable);
  cb["serviceArguments"]["protocol"] = "udp";  // (no connect to judge)
  r = parseRule(cb);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().source, "serviceArguments.cb_enable");
  json h = j;
  h["serviceArguments"]["model_name"] = "llama";
  ASSERT_FALSE(parseRule(h));
  json sel = j;
  sel["serviceArguments"]["selector"] = "lc_light";  // (a mode 4 stage: would be inert)
  r = parseRule(sel);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().source, "serviceArguments.selector");
  json icmp = j;
  icmp["serviceArguments"]["protocol"] = "icmp";
  r = parseRule(icmp);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().source, "serviceArguments.protocol");
}

TEST(RuleJson, OmitEmptyLikeTheUpstreamGateway) {
  auto r = parseRule(seedChwbl());
  ASSERT_TRUE(r);
  json out = r->toJson();
  EXPECT_EQ(out["serviceArguments"]["backend_protocol"], "http1");  // always shown for mode 4
  EXPECT_EQ(out["serviceArguments"]["mode"], 4);
  EXPECT_FALSE(out["serviceArguments"].contains("sse_mode"));
  EXPECT_TRUE(out["secondaryIPs"].is_null());
  EXPECT_EQ(out["endpoints"][0]["state"], "active");
  json s = simple();
  s["serviceArguments"]["chwbl_replication"] = 5;  // chwbl_* shown only for sel 8/10
  auto r2 = parseRule(s);
  ASSERT_TRUE(r2);
  EXPECT_FALSE(r2->toJson()["serviceArguments"].contains("chwbl_replication"));
}

TEST(RuleParse, SessionHeaderForms) {
  for (const char* ok : {"x-session", "cookie:sid", "query:s", "basic-auth", ""}) {
    json j = simple();
    j["serviceArguments"]["sel"] = 3;
    j["serviceArguments"]["session_header_name"] = ok;
    auto r = parseRule(j);
    ASSERT_TRUE(r) << ok << ": " << r.error().what;
    EXPECT_EQ(r->session_header_name, ok);
  }
}

TEST(RuleParse, SameDefinitionIgnoresId) {
  auto a = parseRule(simple());
  json j = simple();
  j["serviceArguments"]["id"] = "abc";
  auto b = parseRule(j);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->sameDefinition(*b));
  j["endpoints"][0]["weight"] = 3;
  auto c = parseRule(j);
  EXPECT_FALSE(a->sameDefinition(*c));
}

}  // namespace
}  // namespace kvgate::config
