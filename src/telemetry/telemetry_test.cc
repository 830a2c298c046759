// W3C trace context parsing (the spec's own examples and its invalid cases), the ratio sampler
// (hand-computed thresholds), the OTLP/HTTP JSON shape (opentelemetry-proto's JSON mapping) and
// the tracer's bounded queue.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "http/asio.h"
#include "telemetry/otlp_json.h"
#include "telemetry/trace_context.h"
#include "telemetry/tracer.h"

namespace kvgate::telemetry {
namespace {

TEST(TraceContext, ParsesTheSpecExample) {
  TraceParent p;
  ASSERT_TRUE(parseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", p));
  EXPECT_EQ(hex(p.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(hex(p.parent_id), "00f067aa0ba902b7");
  EXPECT_TRUE(p.sampled());
  ASSERT_TRUE(parseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", p));
  EXPECT_FALSE(p.sampled());
  // A later version may carry more fields after a dash; its first four are read as 00's.
  ASSERT_TRUE(
      parseTraceParent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-whatever", p));
  EXPECT_EQ(p.flags, 9);
  EXPECT_EQ(formatTraceParent(p.trace_id, p.parent_id, true),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
}

TEST(TraceContext, RefusesWhatTheSpecCallsInvalid) {
  TraceParent p;
  p.flags = 7;
  for (std::string_view bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",     // short
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 with more
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero parent id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // separator
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",   // later version, no dash
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
           " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
       }) {
    EXPECT_FALSE(parseTraceParent(bad, p)) << bad;
  }
  EXPECT_EQ(p.flags, 7);  // untouched
  EXPECT_TRUE(acceptableTraceState("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
  EXPECT_FALSE(acceptableTraceState(""));
  EXPECT_FALSE(acceptableTraceState("a=b\r\nx: y"));
  EXPECT_FALSE(acceptableTraceState(std::string(513, 'a')));
  EXPECT_TRUE(acceptableTraceState(std::string(512, 'a')));
}

TEST(TraceContext, NewIdsAreNonZeroAndDiffer) {
  const TraceId a = newTraceId(), b = newTraceId();
  EXPECT_FALSE(isZero(a));
  EXPECT_NE(a, b);
  EXPECT_FALSE(isZero(newSpanId()));
  EXPECT_EQ(hex(a).size(), 32u);
}

// OpenTelemetry's rule (R >= T, T = (1 - p) x 2^56 over the rightmost 56 bits), worked by hand.
TEST(TraceContext, RatioSamplerReadsTheRightmost56Bits) {
  TraceId t{};
  t[0] = 0xff;                         // the leftmost bytes do not count: R = 0
  EXPECT_FALSE(sampleRatio(t, 0.99));  // 0 >= 0.01 x 2^56 is false
  EXPECT_TRUE(sampleRatio(t, 1.0));    // T = 0: always
  t[9] = 0x80;                         // R = 2^55
  EXPECT_TRUE(sampleRatio(t, 0.5));    // T = 2^55
  EXPECT_FALSE(sampleRatio(t, 0.4999));
  t[9] = 0xff;
  for (size_t i = 10; i < 16; ++i) t[i] = 0xff;  // R = 2^56 - 1
  EXPECT_TRUE(sampleRatio(t, 0.0001));           // T = 0.9999 x 2^56 < R
  EXPECT_FALSE(sampleRatio(t, 0.0));             // never
  // Nested: whatever ratio 0.1 keeps, ratio 0.5 keeps too (1000 random ids).
  for (int i = 0; i < 1000; ++i) {
    const TraceId r = newTraceId();
    if (sampleRatio(r, 0.1)) EXPECT_TRUE(sampleRatio(r, 0.5));
  }
}

TEST(OtlpJson, EncodesIdsAsHexAndIntegersAsStrings) {
  SpanRecord s;
  TraceParent p;
  ASSERT_TRUE(parseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", p));
  s.trace_id = p.trace_id;
  s.parent_id = p.parent_id;
  s.span_id = {1, 2, 3, 4, 5, 6, 7, 8};
  s.name = "POST /v1/completions";
  s.kind = SpanRecord::Kind::kServer;
  s.start_ns = 1700000000000000001ULL;
  s.end_ns = 1700000000500000000ULL;
  s.attrs = {{"gen_ai.request.model", std::string("m\xff")},
             {"gen_ai.usage.input_tokens", int64_t{12}},
             {"kvgate.share", 0.5},
             {"kvgate.spill", true}};
  s.events = {{"first_token", 1700000000100000000ULL}};
  s.error = true;
  s.status_message = "upstream 502";
  s.trace_state = "rojo=1";
  SpanRecord root;
  root.trace_id = p.trace_id;
  root.span_id = {9, 9, 9, 9, 9, 9, 9, 9};
  root.name = "root";
  const auto j = nlohmann::json::parse(encodeOtlpJson({s, root}, "kvgate", "1.2.3"));
  const auto& rs = j.at("resourceSpans").at(0);
  EXPECT_EQ(rs.at("resource").at("attributes").at(0).at("key"), "service.name");
  EXPECT_EQ(rs.at("resource").at("attributes").at(0).at("value").at("stringValue"), "kvgate");
  const auto& ss = rs.at("scopeSpans").at(0);
  EXPECT_EQ(ss.at("scope").at("name"), "kvgate");
  const auto& a = ss.at("spans").at(0);
  EXPECT_EQ(a.at("traceId"), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(a.at("spanId"), "0102030405060708");
  EXPECT_EQ(a.at("parentSpanId"), "00f067aa0ba902b7");
  EXPECT_EQ(a.at("traceState"), "rojo=1");
  EXPECT_EQ(a.at("kind"), 2);
  EXPECT_EQ(a.at("startTimeUnixNano"), "1700000000000000001");  // exact: a string
  EXPECT_EQ(a.at("endTimeUnixNano"), "1700000000500000000");
  EXPECT_EQ(a.at("attributes").at(0).at("value").at("stringValue"), "m\xef\xbf\xbd");  // U+FFFD
  EXPECT_EQ(a.at("attributes").at(1).at("value").at("intValue"), "12");
  EXPECT_EQ(a.at("attributes").at(2).at("value").at("doubleValue"), 0.5);
  EXPECT_EQ(a.at("attributes").at(3).at("value").at("boolValue"), true);
  EXPECT_EQ(a.at("events").at(0).at("name"), "first_token");
  EXPECT_EQ(a.at("events").at(0).at("timeUnixNano"), "1700000000100000000");
  EXPECT_EQ(a.at("status").at("code"), 2);
  EXPECT_EQ(a.at("status").at("message"), "upstream 502");
  const auto& b = ss.at("spans").at(1);
  EXPECT_FALSE(b.contains("parentSpanId"));  // a root
  EXPECT_FALSE(b.contains("events"));
  EXPECT_TRUE(b.at("status").empty());  // UNSET
}

TEST(Tracer, RefusesBadOptions) {
  TracerOptions o;
  o.endpoint = "ftp://x";
  EXPECT_FALSE(Tracer::create(o));
  o.endpoint = "http://";
  EXPECT_FALSE(Tracer::create(o));
  o.endpoint = "http://127.0.0.1:4318";
  o.sample_ratio = 1.5;
  EXPECT_FALSE(Tracer::create(o));
  o.sample_ratio = 0.5;
  o.batch_spans = o.queue_spans + 1;
  EXPECT_FALSE(Tracer::create(o));
  o.batch_spans = 10;
  EXPECT_TRUE(Tracer::create(o));
}

TEST(Tracer, DropsWhatDoesNotFitAndCountsFailedExports) {
  TracerOptions o;
  o.endpoint = "http://127.0.0.1:1";  // nothing listens: every export fails
  o.queue_spans = 4;
  o.batch_spans = 2;
  o.timeout = std::chrono::milliseconds(500);
  auto t = Tracer::create(o);
  ASSERT_TRUE(t);
  auto spans = [](size_t n) { return std::vector<SpanRecord>(n); };
  (*t)->offer(spans(3));  // queued (not started: nothing is sent yet)
  (*t)->offer(spans(2));  // 3 + 2 > 4: both dropped
  EXPECT_EQ((*t)->dropped(), 2u);
  (*t)->offer(spans(1));  // 4: fits
  EXPECT_EQ((*t)->dropped(), 2u);
  (*t)->start();
  (*t)->stop();                   // sends what is queued (not past a failed batch), then joins
  EXPECT_GE((*t)->failed(), 2u);  // at least the first batch was tried
  EXPECT_EQ((*t)->failed() + (*t)->droppedAtStop(), 4u);
  EXPECT_EQ((*t)->exported(), 0u);
  (*t)->offer(spans(1));  // after stop: dropped
  EXPECT_EQ((*t)->dropped(), 3u);
  const std::string m = (*t)->metricsText();
  EXPECT_NE(m.find("kvgate_otlp_spans_total{outcome=\"dropped_queue_full\"} 3"), std::string::npos)
      << m;
  EXPECT_NE(m.find("kvgate_otlp_spans_total{outcome=\"export_failed\"} " +
                   std::to_string((*t)->failed())),
            std::string::npos);
}

// Workers offer from several threads while the export thread takes batches (TSan's leg runs it):
// every span is exported, dropped or failed, none counted twice or lost.
// The last flush against a collector that accepts and never answers takes one timeout, not one a
// batch (a shutdown is not held for queue / batch timeouts).
TEST(Tracer, StopIsBoundedByOneTimeoutWhenTheCollectorHangs) {
  asio::io_context io;
  asio::ip::tcp::acceptor acc(io, {asio::ip::make_address("127.0.0.1"), 0});  // never accepts
  TracerOptions o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(acc.local_endpoint().port());
  o.queue_spans = 100;
  o.batch_spans = 10;
  o.interval = std::chrono::minutes(10);  // nothing is sent before stop()
  o.timeout = std::chrono::milliseconds(300);
  auto t = Tracer::create(o);
  ASSERT_TRUE(t);
  (*t)->start();
  (*t)->offer(std::vector<SpanRecord>(100));  // 10 batches
  const auto t0 = std::chrono::steady_clock::now();
  (*t)->stop();
  const auto took = std::chrono::steady_clock::now() - t0;
  // One-sided and wide: ten batches would take 3 s; one timeout is 0.3 s.
  EXPECT_LT(took, std::chrono::milliseconds(2500));
  EXPECT_EQ((*t)->failed() + (*t)->droppedAtStop(), 100u);
  EXPECT_GE((*t)->droppedAtStop(), 80u);
}

TEST(Tracer, ConcurrentOffersAreAllAccountedFor) {
  TracerOptions o;
  o.endpoint = "http://127.0.0.1:1";  // every export fails fast
  o.queue_spans = 64;
  o.batch_spans = 8;
  o.interval = std::chrono::milliseconds(10);
  o.timeout = std::chrono::milliseconds(200);
  auto t = Tracer::create(o);
  ASSERT_TRUE(t);
  (*t)->start();
  std::vector<std::thread> th;
  for (int k = 0; k < 4; ++k)
    th.emplace_back([&] {
      for (int i = 0; i < 500; ++i) (*t)->offer(std::vector<SpanRecord>(2));
    });
  for (auto& x : th) x.join();
  (*t)->stop();
  EXPECT_EQ((*t)->exported() + (*t)->dropped() + (*t)->failed() + (*t)->droppedAtStop(),
            4u * 500 * 2);
}

}  // namespace
}  // namespace kvgate::telemetry
