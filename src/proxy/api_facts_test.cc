// The API a path names and the request shape each API's engine reads (api_facts.h).
#include "proxy/api_facts.h"

#include <gtest/gtest.h>

#include "proxy/response_homes.h"

namespace kvgate::proxy {
namespace {

TEST(ApiFacts, PathsNameTheirApi) {
  EXPECT_EQ(apiOf("/v1/chat/completions"), Api::kOpenAi);
  EXPECT_EQ(apiOf("/v1/completions"), Api::kOpenAi);
  EXPECT_EQ(apiOf("/v1/messages"), Api::kMessages);
  EXPECT_EQ(apiOf("/anthropic/v1/messages?beta=true"), Api::kMessages);
  EXPECT_EQ(apiOf("/v1/messages/count_tokens"), Api::kCountTokens);
  EXPECT_EQ(apiOf("/v1/responses"), Api::kResponses);
  EXPECT_EQ(apiOf("/v1/responses/resp_1"), Api::kOpenAi);  // GET a stored response
  for (const char* p : {"/v1/embeddings", "/v1/rerank", "/rerank", "/v2/rerank", "/score", "/v1/score",
                        "/classify", "/pooling", "/v1/embeddings?x=1"})
    EXPECT_EQ(apiOf(p), Api::kPooling) << p;
  EXPECT_EQ(apiOf("/v1/embeddingsx"), Api::kOpenAi);
}

TEST(ApiFacts, ShapesAsTheEnginesRead) {
  routing::RequestFacts f;
  // The body said max_tokens 100, max_completion_tokens 7, max_output_tokens 50, n 4, and one of
  // them was unreadable.
  auto body = [&] {
    f.clear();
    f.count_fields = {100, 7, 50};
    f.max_tokens = 100;
    f.n = 4;
    f.counts_unreadable = true;
  };
  body();
  messagesShape(Api::kMessages, f);  // only max_tokens
  EXPECT_EQ(f.max_tokens, 100);
  EXPECT_FALSE(f.n);
  EXPECT_FALSE(f.counts_unreadable);
  body();
  messagesShape(Api::kCountTokens, f);  // nothing generated
  EXPECT_EQ(f.max_tokens, 0);
  body();
  responsesShape(f);  // only max_output_tokens
  EXPECT_EQ(f.max_tokens, 50);
  EXPECT_FALSE(f.n);
  body();
  poolingShape(f);
  EXPECT_EQ(f.max_tokens, 0);
  EXPECT_FALSE(f.counts_unreadable);
  // A Messages body whose max_tokens was unreadable stays conservative.
  body();
  f.count_fields[0].reset();
  messagesShape(Api::kMessages, f);
  EXPECT_FALSE(f.max_tokens);
  EXPECT_TRUE(f.counts_unreadable);
}

}  // namespace
}  // namespace kvgate::proxy

namespace kvgate::proxy {
namespace {

TEST(ResponseHomes, IdFromTheFirstBytesOfAnAnswer) {
  EXPECT_EQ(responseIdIn(R"({"id":"resp_abc-1","object":"response","output":[{"id":"msg_x"}]})"),
            "resp_abc-1");
  EXPECT_EQ(responseIdIn("event: response.created\ndata: {\"type\":\"response.created\","
                         "\"sequence_number\":0,\"response\":{\"id\": \"resp_9\",\"status\":1}}"),
            "resp_9");
  EXPECT_EQ(responseIdIn(R"({"id":"resp_cut)"), "");         // not complete yet
  EXPECT_EQ(responseIdIn(R"({"id":"bad id"})"), "");         // not [A-Za-z0-9_-]
  EXPECT_EQ(responseIdIn(R"({"item_id":"x","id":5})"), "");  // no string id
  EXPECT_EQ(responseIdIn(R"({"id":""})"), "");
  EXPECT_EQ(responseIdIn(std::string("{\"id\":\"") + std::string(300, 'a') + "\"}"), "");
}

TEST(ResponseHomes, RemembersBoundedOldestFirst) {
  ResponseHomes h;
  h.remember("resp_0", "10.0.0.1:8000", "key-a");
  EXPECT_EQ(h.find("resp_0", "key-a"), "10.0.0.1:8000");
  // The first answer wins: a second one with the same id (a client choosing request_id) moves
  // nothing; another principal does not see the id at all.
  h.remember("resp_0", "10.0.0.2:8000", "key-b");
  EXPECT_EQ(h.find("resp_0", "key-a"), "10.0.0.1:8000");
  bool foreign = false;
  EXPECT_EQ(h.find("resp_0", "key-b", &foreign), "");
  EXPECT_TRUE(foreign);  // (known, another principal's)
  EXPECT_EQ(h.find("resp_0", ""), "");
  EXPECT_EQ(h.find("resp_none", "key-a", &foreign), "");
  EXPECT_FALSE(foreign);  // (not known at all)
  EXPECT_EQ(h.find("resp_0", "key-a", &foreign), "10.0.0.1:8000");
  EXPECT_FALSE(foreign);
  // The data plane's owners: an id one rule relayed is foreign on another rule for another
  // principal (rules may share engines), unknown there for its own.
  auto owners = std::make_shared<ResponseHomes>();
  ResponseHomes rule1(owners), rule2(owners);
  rule1.remember("resp_x", "10.0.0.1:8000", "key-a");
  EXPECT_EQ(rule2.find("resp_x", "key-b", &foreign), "");
  EXPECT_TRUE(foreign);
  EXPECT_EQ(rule2.find("resp_x", "key-a", &foreign), "");
  EXPECT_FALSE(foreign);
  EXPECT_EQ(rule1.find("resp_x", "key-a", &foreign), "10.0.0.1:8000");
  // Another principal's answer with that id on the other rule does not take it over there.
  EXPECT_FALSE(rule2.remember("resp_x", "10.0.0.2:8000", "key-b"));
  EXPECT_EQ(rule2.find("resp_x", "key-b", &foreign), "");
  EXPECT_TRUE(foreign);
  for (size_t i = 1; i <= ResponseHomes::kMaxHomes; ++i)
    h.remember("resp_" + std::to_string(i), "e", "");
  EXPECT_EQ(h.size(), ResponseHomes::kMaxHomes);
  EXPECT_EQ(h.find("resp_0", "key-a"), "");  // the oldest went first
  EXPECT_EQ(h.find("resp_1", ""), "e");
  h.remember(std::string(ResponseHomes::kMaxIdBytes + 1, 'x'), "e", "");  // too long: not kept
  EXPECT_EQ(h.size(), ResponseHomes::kMaxHomes);
}

}  // namespace
}  // namespace kvgate::proxy
