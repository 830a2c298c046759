// loxilb_ai_requests_total / loxilb_ai_active_streams: counts, the thread-local fast path, label
// bounds, escaping, and streams released on every path.
#include "metrics/ai_requests.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvgate::metrics {
namespace {

size_t countOf(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(AiRequests, CountsBySeriesIncludingTheRepeatedFastPath) {
  AiRequests t;
  for (int i = 0; i < 3; ++i) t.count("llama", "acme", 200, AiOutcome::kCompleted);
  t.count("llama", "acme", 429, AiOutcome::kDenied);
  t.count("llama", "acme", 200, AiOutcome::kCompleted);  // (hint moved off, then back)
  t.count("", "", 502, AiOutcome::kFailed);
  t.count("llama", "", 0, AiOutcome::kCancelled);
  std::thread([&t] { t.count("llama", "acme", 200, AiOutcome::kCompleted); }).join();
  const std::string r = t.render();
  EXPECT_NE(r.find("loxilb_ai_requests_total{model=\"llama\",tenant=\"acme\",status=\"200\","
                   "outcome=\"completed\"} 5\n"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("{model=\"llama\",tenant=\"acme\",status=\"429\",outcome=\"denied\"} 1\n"),
            std::string::npos);
  EXPECT_NE(r.find("{model=\"\",tenant=\"\",status=\"502\",outcome=\"failed\"} 1\n"),
            std::string::npos);
  EXPECT_NE(r.find("{model=\"llama\",tenant=\"\",status=\"0\",outcome=\"cancelled\"} 1\n"),
            std::string::npos);
  // A second table never sees the first one's counts (the thread-local hint is per table).
  AiRequests u;
  u.count("llama", "acme", 200, AiOutcome::kCompleted);
  EXPECT_NE(u.render().find("outcome=\"completed\"} 1\n"), std::string::npos);
  EXPECT_NE(t.render().find("outcome=\"completed\"} 5\n"), std::string::npos);
}

TEST(AiRequests, HostileLabelsAreBoundedAndEscaped) {
  AiRequests t;
  for (size_t i = 0; i < AiRequests::kMaxModels + 50; ++i)
    t.count("model-" + std::to_string(i), "", 200, AiOutcome::kCompleted);
  std::string r = t.render();
  EXPECT_EQ(countOf(r, "loxilb_ai_requests_total{"), AiRequests::kMaxModels + 1);
  EXPECT_NE(r.find("{model=\"_other\",tenant=\"\",status=\"200\",outcome=\"completed\"} 50\n"),
            std::string::npos);
  AiRequests e;
  e.count(std::string(1000, 'm'), "t\"\n{x}", 200, AiOutcome::kCompleted);
  r = e.render();
  EXPECT_NE(r.find("model=\"" + std::string(AiRequests::kMaxModelBytes, 'm') + "\""),
            std::string::npos);
  EXPECT_EQ(r.find(std::string(AiRequests::kMaxModelBytes + 1, 'm')), std::string::npos);
  EXPECT_NE(r.find("tenant=\"t\\\"?{x}\""), std::string::npos) << r;  // (quote escaped; newline '?')
  // Tenants are bounded too; and the series count overall.
  AiRequests many;
  for (size_t i = 0; i < AiRequests::kMaxTenants + 10; ++i)
    many.count("m", "tenant-" + std::to_string(i), 200, AiOutcome::kCompleted);
  r = many.render();
  EXPECT_NE(r.find("{model=\"m\",tenant=\"_other\",status=\"200\",outcome=\"completed\"} 10\n"),
            std::string::npos);
  // An engine choosing every status from 100 to 999: the series stop at kMaxSeries + the
  // overflow's status classes.
  AiRequests wide;
  for (int status = 100; status < 1000; ++status)
    for (int m = 0; m < 20; ++m)
      for (auto o : {AiOutcome::kFailed, AiOutcome::kCompleted})
        wide.count("m" + std::to_string(m), "", status, o);
  r = wide.render();
  EXPECT_LE(countOf(r, "loxilb_ai_requests_total{"), AiRequests::kMaxSeries + 40);
  EXPECT_NE(r.find("{model=\"_other\",tenant=\"_other\",status=\"900\",outcome=\"failed\"}"),
            std::string::npos);
}

// Invalid UTF-8 and control characters never reach the exposition (a scraper would refuse all
// of it); a multibyte character is never cut in half.
TEST(AiRequests, LabelsAreValidUtf8) {
  AiRequests t;
  t.count(std::string(127, 'a') + "\xC3\xA9", "", 200, AiOutcome::kCompleted);  // é at 127-128
  t.count("bad\xFF\xC3(\x01x", "\xE2\x82", 200, AiOutcome::kCompleted);
  t.count("\xE2\x82\xAC\xF0\x9F\x98\x80ok", "", 200, AiOutcome::kCompleted);  // € and 😀
  t.count("\xC0\xAF\xED\xA0\x80", "", 200, AiOutcome::kCompleted);  // overlong, surrogate
  const std::string r = t.render();
  EXPECT_NE(r.find("model=\"" + std::string(127, 'a') + "\""), std::string::npos);
  EXPECT_NE(r.find("model=\"bad?" "?(?x\",tenant=\"?" "?\""), std::string::npos) << r;
  EXPECT_NE(r.find("model=\"\xE2\x82\xAC\xF0\x9F\x98\x80ok\""), std::string::npos);
  EXPECT_NE(r.find("model=\"?" "?" "?" "?" "?\""), std::string::npos);
  for (unsigned char c : r) EXPECT_TRUE(c == '\n' || c >= 0x20) << int(c);
}

TEST(AiRequests, StreamsGaugeReleasedOnEveryPath) {
  AiRequests t;
  {
    StreamHold a, b;
    a.open(t, "llama");
    b.open(t, "llama");
    EXPECT_NE(t.render().find("loxilb_ai_active_streams{model=\"llama\"} 2\n"), std::string::npos);
    b.release();
    b.release();  // (idempotent)
    EXPECT_NE(t.render().find("loxilb_ai_active_streams{model=\"llama\"} 1\n"), std::string::npos);
    try {
      StreamHold c;
      c.open(t, "qwen");
      throw std::runtime_error("client gone");
    } catch (const std::runtime_error&) {
    }
  }
  const std::string r = t.render();
  EXPECT_NE(r.find("loxilb_ai_active_streams{model=\"llama\"} 0\n"), std::string::npos);
  EXPECT_NE(r.find("loxilb_ai_active_streams{model=\"qwen\"} 0\n"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::metrics
