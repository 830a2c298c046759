// The response filters (proxy/filters/response_filter.h): which run on which answer, and what
// each makes of the payload, driven as the relay drives them (begin, the pieces, end). Expected
// values are worked by hand from the answers written here.
#include <gtest/gtest.h>

#include <memory>

#include "proxy/filters/response_filter.h"
#include "proxy/response_homes.h"
#include "proxy/rule_stats.h"
#include "proxy/tokenize_local.h"

namespace kvgate::proxy {
namespace {

// A response head parsed from `text` (kept alive in `buf`).
struct Resp {
  std::string buf;
  http::ResponseHead rh;
  explicit Resp(std::string text) : buf(std::move(text)) {
    http::ParseError perr;
    EXPECT_GT(http::parseResponseHead(buf.data(), buf.size(), 64 * 1024, "POST", rh, perr), 0)
        << perr.reason;
  }
};

struct Fixture {
  Route route;
  RequestCtx rq;
  Fixture() {
    route.stats = std::make_shared<RuleStats>();
    rq.begin(std::chrono::steady_clock::now());
  }
};

std::vector<std::string> names(const std::vector<const ResponseFilter*>& chain) {
  std::vector<std::string> out;
  for (const ResponseFilter* f : chain) out.emplace_back(f->name());
  return out;
}

const char kJson[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n";
const char kSse[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

TEST(ResponseFilters, ChainInOrder) {
  EXPECT_EQ(names(responseFilters()),
            (std::vector<std::string>{"usage", "usage_strip", "tokenize_check", "response_id"}));
  int rewriters = 0;
  for (const ResponseFilter* f : responseFilters()) rewriters += f->rewrites();
  EXPECT_EQ(rewriters, 1);  // the relay frames one rewriter's output
  EXPECT_LE(responseFilters().size(), kMaxResponseFilters);  // the relay's array holds them all
  EXPECT_TRUE(usageStripFilter().rewrites());
}

TEST(ResponseFilters, UsageRunsForAQuotaOrATraceAndReadsTheUsageAcrossPieces) {
  Fixture f;
  Resp r(kJson);
  const ResponseFilter& usage = usageScanFilter();
  EXPECT_FALSE(usage.begin({f.rq, f.route, r.rh, false}));  // neither metered nor traced
  f.rq.quota.active = true;
  EXPECT_FALSE(usage.begin({f.rq, f.route, r.rh, true}));  // HEAD: no body
  const ResponseEnv env{f.rq, f.route, r.rh, false};
  ASSERT_TRUE(usage.begin(env));
  const std::string body =
      R"({"id":"x","usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}})";
  EXPECT_TRUE(usage.payload(env, std::string_view(body).substr(0, 20), nullptr));
  EXPECT_TRUE(usage.payload(env, std::string_view(body).substr(20), nullptr));
  ASSERT_TRUE(f.rq.usage.usage().has_value());
  EXPECT_EQ(f.rq.usage.usage()->prompt_tokens, 3);
  EXPECT_EQ(f.rq.usage.usage()->completion_tokens, 5);
  EXPECT_EQ(f.rq.usage.usage()->total_tokens, 8);
}

TEST(ResponseFilters, UsageStripOnlyOnAMeteredStreamTheGatewayAskedUsageFor) {
  Fixture f;
  Resp sse(kSse), json(kJson),
      err("HTTP/1.1 400 Bad Request\r\nContent-Type: text/event-stream\r\n"
          "Content-Length: 0\r\n\r\n");
  const ResponseFilter& strip = usageStripFilter();
  f.rq.quota.active = true;
  EXPECT_FALSE(strip.begin({f.rq, f.route, sse.rh, false}));  // usage not asked for by us
  f.rq.quota.inject = true;
  EXPECT_FALSE(strip.begin({f.rq, f.route, json.rh, false}));  // not a stream
  EXPECT_FALSE(strip.begin({f.rq, f.route, err.rh, false}));   // an error answer
  EXPECT_FALSE(strip.begin({f.rq, f.route, sse.rh, true}));    // HEAD
  const ResponseEnv env{f.rq, f.route, sse.rh, false};
  ASSERT_TRUE(strip.begin(env));
  // The usage-only chunk goes; include_usage's "usage":null member goes from the others.
  const std::string in =
      "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n"
      "data: [DONE]\n\n";
  std::string out, piece;
  for (size_t i = 0; i < in.size(); i += 7) {
    piece.clear();
    EXPECT_TRUE(strip.payload(env, std::string_view(in).substr(i, 7), &piece));
    out += piece;
  }
  piece.clear();
  strip.finish(env, piece);
  out += piece;
  EXPECT_EQ(out, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n");
}

TEST(ResponseFilters, ResponseIdRemembersTheHomeForTheOwnerAndThenStops) {
  Fixture f;
  f.route.stats->response_homes = std::make_shared<ResponseHomes>();
  Resp r(kJson);
  const std::string endpoint = "127.0.0.1:8001";
  f.rq.outcome.endpoint = &endpoint;
  f.rq.outcome.key_id = "key1";
  const ResponseFilter& rid = responseIdFilter();
  EXPECT_FALSE(rid.begin({f.rq, f.route, r.rh, false}));  // not the Responses API
  f.rq.api = Api::kResponses;
  Resp failed("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\n");
  EXPECT_FALSE(rid.begin({f.rq, f.route, failed.rh, false}));  // not a success
  {
    Fixture nohomes;  // a rule that keeps no homes (P/D)
    nohomes.rq.api = Api::kResponses;
    EXPECT_FALSE(rid.begin({nohomes.rq, nohomes.route, r.rh, false}));
  }
  EXPECT_FALSE(rid.begin({f.rq, f.route, r.rh, true}));  // HEAD
  const ResponseEnv env{f.rq, f.route, r.rh, false};
  ASSERT_TRUE(rid.begin(env));
  // The id split across two pieces: found with the second, then no more pieces are wanted.
  EXPECT_TRUE(rid.payload(env, R"({"id":"resp_a)", nullptr));
  EXPECT_FALSE(rid.payload(env, R"(bc","object":"response"})", nullptr));
  EXPECT_EQ(f.route.stats->response_homes->find("resp_abc", "kkey1"), endpoint);
  EXPECT_EQ(f.route.stats->response_homes->find("resp_abc", "kother"), "");  // another owner
  EXPECT_EQ(f.route.stats->response_pins[0].load(), 1u);
  // No id in the first 4 KiB: given up.
  Fixture g;
  g.route.stats->response_homes = std::make_shared<ResponseHomes>();
  g.rq.api = Api::kResponses;
  g.rq.outcome.endpoint = &endpoint;
  const ResponseEnv env2{g.rq, g.route, r.rh, false};
  ASSERT_TRUE(rid.begin(env2));
  EXPECT_TRUE(rid.payload(env2, std::string(4000, ' '), nullptr));
  EXPECT_FALSE(rid.payload(env2, std::string(200, ' '), nullptr));
  EXPECT_EQ(g.route.stats->response_pins[0].load(), 0u);
}

TEST(ResponseFilters, TokenizeCheckCountsARefusalAndDropsAnOversizedAnswer) {
  const ResponseFilter& tc = tokenizeCheckFilter();
  Resp ok(kJson), refused("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
  {  // no check pending: it does not run
    Fixture f;
    EXPECT_FALSE(tc.begin({f.rq, f.route, ok.rh, false}));
  }
  auto pending = [] {
    auto a = std::make_unique<TokenizeAnswer>();
    a->model = "m";
    a->key = "m|form";
    a->answer_bytes = 16;
    return a;
  };
  {  // the engine refused what the gateway would have answered: a mismatch of the form
    Fixture f;
    f.route.tokenize_mirror = std::make_shared<TokenizeMirror>();
    f.rq.tok_check = pending();
    EXPECT_FALSE(tc.begin({f.rq, f.route, refused.rh, false}));
    EXPECT_FALSE(f.rq.tok_check);
    EXPECT_EQ(f.route.stats->tokenize_events[0][2].load(), 1u);
    EXPECT_TRUE(f.route.tokenize_mirror->blocked("m|form"));
  }
  {  // another failure (the engine's own trouble) and an encoded answer: not read, not counted
    Resp busy("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    Resp gzip("HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 10\r\n\r\n");
    for (const Resp* r : {&busy, &gzip}) {
      Fixture f;
      f.route.tokenize_mirror = std::make_shared<TokenizeMirror>();
      f.rq.tok_check = pending();
      EXPECT_FALSE(tc.begin({f.rq, f.route, r->rh, false}));
      EXPECT_FALSE(f.rq.tok_check);
      EXPECT_EQ(f.route.stats->tokenize_events[0][2].load(), 0u);
      EXPECT_FALSE(f.route.tokenize_mirror->blocked("m|form"));
    }
  }
  {  // a 200 answer much bigger than the gateway's: not captured, not checked
    Fixture f;
    f.route.tokenize_mirror = std::make_shared<TokenizeMirror>();
    f.rq.tok_check = pending();
    const ResponseEnv env{f.rq, f.route, ok.rh, false};
    ASSERT_TRUE(tc.begin(env));
    EXPECT_TRUE(tc.payload(env, "{\"tokens\":[1,2]", nullptr));  // 15 bytes: kept
    EXPECT_EQ(f.rq.tok_capture, "{\"tokens\":[1,2]");
    EXPECT_FALSE(tc.payload(env, ",3]}", nullptr));  // 19 > 16
    EXPECT_FALSE(f.rq.tok_check);
    EXPECT_TRUE(f.rq.tok_capture.empty());
    tc.end(env);  // nothing left to check
    EXPECT_EQ(f.route.stats->tokenize_events[0][2].load(), 0u);
    EXPECT_FALSE(f.route.tokenize_mirror->blocked("m|form"));
  }
}

}  // namespace
}  // namespace kvgate::proxy
