// Usage found in relayed bodies (any split), and the SSE filter that hides what the gateway
// asked for. Expected values are written out by hand from the bodies below.
#include "governance/usage.h"

#include <gtest/gtest.h>

namespace kvgate::governance {
namespace {

// Feeds `body` in pieces of `step` bytes.
UsageScanner scan(const std::string& body, size_t step) {
  UsageScanner s;
  for (size_t i = 0; i < body.size(); i += step) s.feed(std::string_view(body).substr(i, step));
  return s;
}

TEST(UsageScanner, FindsTheUsageOfAJsonAnswerInAnySplit) {
  const std::string body =
      R"({"id":"x","choices":[{"message":{"content":"the \"usage\": {\"total_tokens\": 999} trick"}}],)"
      R"("usage": {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42,)"
      R"( "prompt_tokens_details": {"cached_tokens": 4}}})";
  for (size_t step : {size_t(1), size_t(2), size_t(7), body.size()}) {
    auto s = scan(body, step);
    ASSERT_TRUE(s.usage()) << step;
    EXPECT_EQ(s.usage()->prompt_tokens, 12);
    EXPECT_EQ(s.usage()->completion_tokens, 30);
    EXPECT_EQ(s.usage()->charge(), 42);  // not the 999 inside the content string
    EXPECT_EQ(s.dataEvents(), 0u);
  }
}

TEST(UsageScanner, StreamUsageChunkAndEventCount) {
  const std::string body =
      "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}],\"usage\":null}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}],\"usage\":null}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n"
      "data: [DONE]\n\n";
  for (size_t step : {size_t(1), size_t(3), body.size()}) {
    auto s = scan(body, step);
    ASSERT_TRUE(s.usage());
    EXPECT_EQ(s.usage()->charge(), 7);  // no total_tokens: prompt + completion
    EXPECT_EQ(s.dataEvents(), 4u);      // four events, [DONE] not counted
  }
  // No usage anywhere: none found, events still counted.
  auto s = scan("data: {\"x\":1}\n\ndata: {\"usage\":null}\n\ndata: [DONE]\n\n", 5);
  EXPECT_FALSE(s.usage());
  EXPECT_EQ(s.dataEvents(), 2u);
}

// The Responses API: usage as input_tokens/output_tokens, at the top level of an answer, or
// inside the top-level "response" object of a stream's response.completed event (where earlier
// events carry "usage":null). A "usage" deeper in the response, or a "response" that is not a
// top-level member, is not taken.
TEST(UsageScanner, ResponsesApiUsage) {
  const std::string answer =
      R"({"id":"resp_1","object":"response","output":[{"type":"message","content":[)"
      R"({"type":"output_text","text":"\"usage\":{\"total_tokens\":999}"}]}],)"
      R"("usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":0},)"
      R"("output_tokens":9,"output_tokens_details":{"reasoning_tokens":0}}})";
  for (size_t step : {size_t(1), size_t(5), answer.size()}) {
    auto s = scan(answer, step);
    ASSERT_TRUE(s.usage()) << step;
    EXPECT_EQ(s.usage()->prompt_tokens, 11);
    EXPECT_EQ(s.usage()->completion_tokens, 9);
    EXPECT_EQ(s.usage()->charge(), 20);  // 11 + 9: no total_tokens
  }
  const std::string stream =
      "event: response.created\n"
      R"(data: {"type":"response.created","response":{"id":"r","status":"in_progress","usage":null}})"
      "\n\n"
      "event: response.output_text.delta\n"
      R"(data: {"type":"response.output_text.delta","delta":"{\"response\":{\"usage\":{\"total_tokens\":5}}}"})"
      "\n\n"
      "event: response.completed\n"
      R"(data: {"type":"response.completed","sequence_number":9,"response":{"id":"r",)"
      R"("metadata":{"usage":{"total_tokens":777}},"output":[],"usage":{"input_tokens":40,)"
      R"("output_tokens":2,"total_tokens":42}}})"
      "\n\n";
  for (size_t step : {size_t(1), size_t(4), stream.size()}) {
    auto s = scan(stream, step);
    ASSERT_TRUE(s.usage()) << step;
    EXPECT_EQ(s.usage()->charge(), 42) << step;  // not 5 (in a string) nor 777 (too deep)
    EXPECT_EQ(s.dataEvents(), 3u);
  }
  // An output count alone is no usage (the prompt would go uncharged); an escaped key is not
  // the key "response".
  EXPECT_FALSE(scan(R"({"usage":{"output_tokens":7}})", 3).usage());
  EXPECT_FALSE(scan(R"({"respon\u0073e":{"usage":{"total_tokens":3}}})", 2).usage());
  EXPECT_FALSE(scan(R"({"response\"":{"usage":{"total_tokens":3}}})", 2).usage());
  // "response" nested below the top level is no Responses object.
  auto s = scan(R"({"choices":[{"response":{"usage":{"total_tokens":3}}}]})", 2);
  EXPECT_FALSE(s.usage());
  // After a response object closes, a sibling's usage is not taken at its depth.
  s = scan(R"({"response":{"id":1},"other":{"usage":{"total_tokens":3}}})", 3);
  EXPECT_FALSE(s.usage());
}

// The Anthropic Messages API as vLLM and SGLang stream it: message_start carries the input count
// inside "message" (not taken: too deep), message_delta the input and output counts at the top
// level (taken, as reported); unknown event types and pings pass without effect.
TEST(UsageScanner, MessagesApiUsage) {
  const std::string stream =
      "event: message_start\n"
      R"(data: {"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":16,"output_tokens":0}}})"
      "\n\n"
      "event: ping\ndata: {\"type\": \"ping\"}\n\n"
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\"usage\":{\"input_tokens\":1,\"output_tokens\":1}"}})"
      "\n\n"
      "event: something_new\ndata: {\"type\":\"something_new\",\"usage\":[1,2]}\n\n"
      "event: message_delta\n"
      R"(data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},)"
      R"("usage":{"input_tokens":16,"output_tokens":2,"cache_read_input_tokens":0}})"
      "\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  for (size_t step : {size_t(1), size_t(7), stream.size()}) {
    auto s = scan(stream, step);
    ASSERT_TRUE(s.usage()) << step;
    EXPECT_EQ(s.usage()->prompt_tokens, 16) << step;
    EXPECT_EQ(s.usage()->completion_tokens, 2) << step;
    EXPECT_EQ(s.usage()->charge(), 18) << step;
    EXPECT_EQ(s.dataEvents(), 6u) << step;
  }
  // A stream cut before message_delta has no usage (settled by estimate).
  EXPECT_FALSE(scan(stream.substr(0, stream.find("event: message_delta")), 5).usage());
  // A non-streamed answer.
  auto s = scan(R"({"id":"m","type":"message","content":[{"type":"text","text":"hi"}],)"
                R"("usage":{"input_tokens":25,"output_tokens":4}})",
                3);
  ASSERT_TRUE(s.usage());
  EXPECT_EQ(s.usage()->charge(), 29);
}

// Anthropic's own stream shape: message_start's "message" carries the input count (and an output
// count of 1), message_delta only the cumulative output count. Expected: 16 input + 15 output.
TEST(UsageScanner, MessagesApiUsageOutputOnlyDelta) {
  const std::string start =
      "event: message_start\n"
      R"(data: {"type":"message_start","message":{"id":"m","type":"message","role":"assistant",)"
      R"("content":[],"usage":{"input_tokens":16,"output_tokens":1}}})"
      "\n\n"
      "event: content_block_delta\n"
      R"(data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}})"
      "\n\n";
  const std::string delta =
      "event: message_delta\n"
      R"(data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}})"
      "\n\n"
      "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  for (size_t step : {size_t(1), size_t(5), start.size() + delta.size()}) {
    auto s = scan(start + delta, step);
    ASSERT_TRUE(s.usage()) << step;
    EXPECT_EQ(s.usage()->prompt_tokens, 16) << step;
    EXPECT_EQ(s.usage()->completion_tokens, 15) << step;
    EXPECT_EQ(s.usage()->charge(), 31) << step;
  }
  // Cut after message_start: its counts alone are no usage (settled as a stream without one).
  EXPECT_FALSE(scan(start, 3).usage());
  // An output-only usage with no message_start before it is not taken (no input count).
  EXPECT_FALSE(scan(delta, 3).usage());
  // A second message_start does not replace the first's input count (one message, one start).
  auto twice = scan(start +
                        R"(data: {"type":"message_start","message":{"usage":{"input_tokens":1}}})"
                        "\n\n" +
                        delta,
                    4);
  ASSERT_TRUE(twice.usage());
  EXPECT_EQ(twice.usage()->charge(), 31);
  // Output counts are cumulative: a later, smaller output-only count does not lower it.
  auto smaller = scan(start + delta +
                          R"(data: {"type":"x","usage":{"output_tokens":1}})"
                          "\n\n",
                      5);
  ASSERT_TRUE(smaller.usage());
  EXPECT_EQ(smaller.usage()->charge(), 31);
  // vLLM's delta (both counts) then an output-only usage (an unknown later event): the whole
  // usage stays.
  const std::string vllm_delta =
      R"(data: {"type":"message_delta","usage":{"input_tokens":16,"output_tokens":15}})"
      "\n\n";
  auto later = scan(start + vllm_delta +
                        R"(data: {"type":"x","usage":{"output_tokens":1}})"
                        "\n\n",
                    6);
  ASSERT_TRUE(later.usage());
  EXPECT_EQ(later.usage()->charge(), 31);
  // A "message" that is a string (an error body) or nested deeper sets no input count.
  EXPECT_FALSE(scan(R"({"message":"usage","x":1})"
                    "\n"
                    R"({"usage":{"output_tokens":3}})",
                    2)
                   .usage());
  EXPECT_FALSE(scan(R"({"choices":[{"message":{"usage":{"input_tokens":9}}}]})"
                    "\n"
                    R"({"usage":{"output_tokens":3}})",
                    2)
                   .usage());
}

TEST(UsageScanner, IgnoresHostileOrMalformedUsage) {
  EXPECT_FALSE(scan(R"({"usage":{"total_tokens":-5}})", 4).usage());
  EXPECT_FALSE(scan(R"({"usage":{"total_tokens":"5"}})", 4).usage());
  EXPECT_FALSE(scan(R"({"usage":{"total_tokens":5)", 4).usage());  // never closed
  // An object over 1 KiB is not captured (and the scan goes on: a later usage counts).
  std::string big = R"({"usage":{"pad":")" + std::string(2000, 'x') + R"(","total_tokens":1},)";
  big += R"("usage":{"total_tokens":9}})";
  auto s = scan(big, 64);
  ASSERT_TRUE(s.usage());
  EXPECT_EQ(s.usage()->charge(), 9);
  // Only a member of the top-level object counts: objects an engine echoes deeper down do not.
  auto d = scan(R"({"tools":[{"usage":{"total_tokens":0}}],"usage":{"total_tokens":5},)"
                R"("echo":{"usage":{"total_tokens":1}},"x":"usage"})",
                5);
  ASSERT_TRUE(d.usage());
  EXPECT_EQ(d.usage()->charge(), 5);
  // Sums that would overflow are capped.
  EXPECT_EQ(parseUsage(R"({"prompt_tokens":9223372036854775807,"completion_tokens":9223372036854775807})")
                ->charge(),
            int64_t(1) << 50);
  // The last usage seen wins.
  auto t = scan(R"({"usage":{"total_tokens":1}} {"usage":{"total_tokens":2}})", 3);
  EXPECT_EQ(t.usage()->charge(), 2);
}

std::string filter(const std::string& in, size_t step, uint64_t* dropped = nullptr) {
  SseUsageFilter f;
  std::string out;
  for (size_t i = 0; i < in.size(); i += step) f.feed(std::string_view(in).substr(i, step), out);
  f.finish(out);
  if (dropped) *dropped = f.dropped();
  return out;
}

TEST(SseUsageFilter, HidesWhatTheGatewayAskedFor) {
  const std::string in =
      "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n"
      "data: {\"usage\":null,\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\r\n\r\n"
      "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n"
      "data: [DONE]\n\n";
  const std::string want =
      "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\r\n\r\n"
      "data: [DONE]\n\n";
  for (size_t step : {size_t(1), size_t(2), size_t(5), in.size()}) {
    uint64_t dropped = 0;
    EXPECT_EQ(filter(in, step, &dropped), want) << step;
    EXPECT_EQ(dropped, 1u);
  }
  // Any spacing of the null member, and CR CR event ends.
  EXPECT_EQ(filter("data: {\"a\":1, \"usage\" : null}\r\rdata: {\"usage\": null, \"b\":2}\n\n", 2),
            "data: {\"a\":1}\r\rdata: {\"b\":2}\n\n");
  // Content that merely mentions usage is left alone (its quotes are escaped).
  const std::string text = "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":null\"}}]}\n\n";
  EXPECT_EQ(filter(text, 3), text);
}

TEST(SseUsageFilter, BoundedOnAHugeEventAndFlushesAnUnterminatedTail) {
  // One event over 64 KiB passes through unexamined (the filter holds at most 64 KiB).
  std::string huge = "data: {\"x\":\"" + std::string(100 * 1024, 'y') + "\",\"usage\":null}\n\n";
  const std::string after = "data: {\"choices\":[{}],\"usage\":null}\n\n";
  EXPECT_EQ(filter(huge + after, 4096), huge + "data: {\"choices\":[{}]}\n\n");
  // A last event without its blank line still reaches the client.
  EXPECT_EQ(filter("data: {\"a\":1}\n\ndata: {\"b\":2}", 3), "data: {\"a\":1}\n\ndata: {\"b\":2}");
}

}  // namespace
}  // namespace kvgate::governance
