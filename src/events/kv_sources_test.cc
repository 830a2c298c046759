// Which publishers the rules name (kvSources): rules built through the API's own parser.
#include "events/kv_sources.h"

#include <gtest/gtest.h>

namespace kvgate::events {
namespace {

config::RuleSpec ruleOf(int vip_port, nlohmann::json args, nlohmann::json endpoints) {
  // A one-element braced list is read differently by the compilers (g++: a one-element array or
  // one-member object; clang: the element itself), so {{"k", v}} and {ep(...)} arrive here as
  // ["k", v] and as one endpoint object under clang (the sanitizer legs): read them as meant.
  if (args.is_array() && args.size() == 2 && args[0].is_string()) {
    nlohmann::json o = nlohmann::json::object();
    o[args[0].get<std::string>()] = args[1];
    args = std::move(o);
  }
  if (endpoints.is_object()) endpoints = nlohmann::json::array({endpoints});
  nlohmann::json sa = {{"externalIP", "127.0.0.1"},
                       {"port", vip_port},
                       {"protocol", "tcp"},
                       {"mode", 4},
                       {"sel", 0}};
  if (args.is_object()) sa.update(args);
  auto r = config::parseRule({{"serviceArguments", sa}, {"endpoints", endpoints}});
  EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().what);
  return r ? *r : config::RuleSpec{};
}

nlohmann::json ep(const char* ip, int port, int role = 0) {
  nlohmann::json e = {{"endpointIP", ip}, {"targetPort", port}, {"weight", 1}};
  if (role) e["ep_role"] = role;
  return e;
}

TEST(KvSources, ModesRolesDefaultsAndEngines) {
  std::vector<config::RuleSpec> rules = {
      ruleOf(8001, {{"kvExactMode", 3}}, {ep("10.0.0.1", 8000), ep("10.0.0.2", 8000)}),
      ruleOf(
          8002,
          {{"kvExactMode", 1}, {"pd_disagg_mode", true}, {"kvZmqPort", 6000}, {"kvDpRankCount", 2}},
          {ep("10.0.1.1", 8000, 1), ep("10.0.1.2", 8000, 2)}),  // decode: not followed
      ruleOf(8003, {}, {ep("10.0.2.1", 8000)}),                 // kvExactMode 0
      ruleOf(8004, {{"kvExactMode", 3}, {"kvEngineType", "sglang"}}, {ep("10.0.3.1", 8000)}),
      ruleOf(8005, {{"kvExactMode", 3}, {"kvEngineType", "trtllm"}}, {ep("10.0.4.1", 8000)}),
  };
  auto s = kvSources(rules);
  ASSERT_TRUE(s.has_value()) << s.error().what;
  ASSERT_EQ(s->size(), 5u);
  EXPECT_EQ((*s)[0].key(), "10.0.0.1:5557");
  EXPECT_EQ((*s)[0].hash_algo, "sha256_cbor");
  EXPECT_EQ((*s)[1].key(), "10.0.0.2:5557");
  EXPECT_EQ((*s)[2].key(), "10.0.1.1:6000");
  EXPECT_EQ((*s)[2].dp_ranks, 2);
  EXPECT_EQ((*s)[3].key(), "10.0.3.1:5557");  // SGLang: same ZMQ framing, its own hash default
  EXPECT_EQ((*s)[3].hash_algo, "sha256_sglang");
  EXPECT_EQ((*s)[4].key(), "10.0.4.1:8000");  // TensorRT-LLM: drained on its serving port
  EXPECT_TRUE((*s)[4].http_drain);
  EXPECT_EQ((*s)[4].hash_algo, "blockhash_trtllm");
  EXPECT_FALSE((*s)[0].http_drain);
}

TEST(KvSources, ConflictsAndLimitsAreRefused) {
  auto a = ruleOf(8001, {{"kvExactMode", 3}}, {ep("10.0.0.1", 8000)});
  auto b = ruleOf(8002, {{"kvExactMode", 3}, {"kvBlockSize", 32}}, {ep("10.0.0.1", 8001)});
  auto r = kvSources({a, b});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, 400);
  EXPECT_NE(r.error().what.find("one inventory"), std::string::npos);
  // The same publisher named twice the same way is one source.
  auto same = ruleOf(8003, {{"kvExactMode", 3}}, {ep("10.0.0.1", 8002)});
  ASSERT_TRUE(kvSources({a, same}).has_value());
  EXPECT_EQ(kvSources({a, same})->size(), 1u);
  // kvZmqPort 65535 with 2 ranks runs past the port range.
  auto wide = ruleOf(8004, {{"kvExactMode", 3}, {"kvZmqPort", 65535}, {"kvDpRankCount", 2}},
                     {ep("10.0.0.9", 8000)});
  EXPECT_FALSE(kvSources({wide}).has_value());
  // 9 endpoints x 8 ranks = 72 publishers: more than the index follows.
  nlohmann::json eps = nlohmann::json::array();
  for (int i = 1; i <= 9; ++i) eps.push_back(ep(("10.0.5." + std::to_string(i)).c_str(), 8000));
  auto many = ruleOf(8005, {{"kvExactMode", 3}, {"kvDpRankCount", 8}}, eps);
  EXPECT_FALSE(kvSources({many}).has_value());
}

TEST(KvSources, ReplayPorts) {
  auto a = ruleOf(8001, {{"kvExactMode", 3}, {"kvReplayPort", 5600}, {"kvDpRankCount", 2}},
                  {ep("10.0.0.1", 8000)});
  auto s = kvSources({a});
  ASSERT_TRUE(s.has_value()) << s.error().what;
  EXPECT_EQ((*s)[0].replay_port, 5600);
  // Replay ports overlapping the event ports (5557..5558 vs 5558..5559), or past 65535.
  auto overlap = ruleOf(8002, {{"kvExactMode", 3}, {"kvReplayPort", 5558}, {"kvDpRankCount", 2}},
                        {ep("10.0.0.2", 8000)});
  auto r = kvSources({overlap});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().what.find("overlap"), std::string::npos);
  auto wide = ruleOf(8003, {{"kvExactMode", 3}, {"kvReplayPort", 65535}, {"kvDpRankCount", 2}},
                     {ep("10.0.0.3", 8000)});
  EXPECT_FALSE(kvSources({wide}).has_value());
  // One publisher named with two different replay ports: a conflict.
  auto other = ruleOf(8004, {{"kvExactMode", 3}, {"kvDpRankCount", 2}}, {ep("10.0.0.1", 8001)});
  r = kvSources({a, other});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().what.find("replay port"), std::string::npos);
}

// security 2 on TensorRT-LLM: the drain carries the rule's mtls_backend fields and checks the
// endpoint's domainName (else its IP); a ZMQ publisher gets none (its events are not HTTP); two
// rules must agree on how one engine is drained.
TEST(KvSources, TensorRtLlmDrainOverTls) {
  nlohmann::json tls_args = {{"kvExactMode", 3},
                             {"kvEngineType", "trtllm"},
                             {"security", 2},
                             {"mtls_backend", {{"verify_server_cert", true}}}};
  nlohmann::json named = ep("10.0.4.2", 8000);
  named["domainName"] = "engine-2.example";
  auto a = ruleOf(8001, tls_args, {ep("10.0.4.1", 8000), named});
  auto vllm = ruleOf(8002, {{"kvExactMode", 3}, {"security", 2}}, {ep("10.0.5.1", 8000)});
  int asked = 0;
  auto s = kvSources({a, vllm}, [&asked](const config::RuleSpec&) {
    ++asked;
    return std::shared_ptr<http::TlsFiles>();
  });
  ASSERT_TRUE(s.has_value()) << s.error().what;
  ASSERT_EQ(s->size(), 3u);
  ASSERT_TRUE((*s)[0].tls.has_value());
  EXPECT_TRUE((*s)[0].tls->verify_server_cert);
  EXPECT_EQ((*s)[0].tls_name, "10.0.4.1");
  EXPECT_EQ((*s)[1].tls_name, "engine-2.example");
  EXPECT_FALSE((*s)[2].tls.has_value());  // vLLM: ZeroMQ, no TLS
  EXPECT_EQ(asked, 2);
  // The same engine drained in plain text by another rule: refused, naming both.
  auto plain = ruleOf(8003, {{"kvExactMode", 3}, {"kvEngineType", "trtllm"}},
                      {ep("10.0.4.1", 8000)});
  auto r = kvSources({a, plain});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, 400);
  EXPECT_NE(r.error().what.find("over TLS and by rule"), std::string::npos) << r.error().what;
  // Over TLS with other verification: refused too; with the same fields: one source.
  nlohmann::json other = tls_args;
  other["mtls_backend"] = nlohmann::json::object();
  EXPECT_FALSE(kvSources({a, ruleOf(8004, other, {ep("10.0.4.1", 8000)})}).has_value());
  auto same = kvSources({a, ruleOf(8005, tls_args, {ep("10.0.4.1", 8000)})});
  ASSERT_TRUE(same.has_value()) << same.error().what;
  EXPECT_EQ(same->size(), 2u);
}

}  // namespace
}  // namespace kvgate::events
