// The Messages API's chat form: expected values written by hand from vLLM's conversion rules
// (vllm/entrypoints/anthropic/serving.py, _convert_anthropic_to_openai_request) and Python's
// json.dumps, not from the code under test.
#include "engines/anthropic_messages.h"

#include <gtest/gtest.h>

namespace kvgate::engines::anthropic {
namespace {

using ojson = nlohmann::ordered_json;

std::string chatOf(std::string_view body, bool count_tokens = false) {
  ChatForm f = toChat(body, count_tokens);
  EXPECT_TRUE(f.ok) << f.error;
  return f.chat.dump();
}

TEST(AnthropicMessages, Paths) {
  EXPECT_EQ(pathOf("/v1/messages"), Path::kMessages);
  EXPECT_EQ(pathOf("/v1/messages?beta=true"), Path::kMessages);
  EXPECT_EQ(pathOf("/api/v1/messages"), Path::kMessages);
  EXPECT_EQ(pathOf("/v1/messages/count_tokens"), Path::kCountTokens);
  EXPECT_EQ(pathOf("/v1/chat/completions"), Path::kNone);
  EXPECT_EQ(pathOf("/v1/messagesx"), Path::kNone);
}

TEST(AnthropicMessages, SystemBlocksAndInlineSystemJoinFirst) {
  EXPECT_EQ(
      chatOf(R"({"model":"m","max_tokens":5,"system":[{"type":"text","text":"x-anthropic-billing-header: 1"},
        {"type":"text","text":"You are "},{"type":"text","text":""},{"type":"text","text":"terse."}],
        "messages":[{"role":"system","content":" Be kind."},{"role":"user","content":"hi"}]})"),
      R"({"messages":[{"role":"system","content":"You are terse. Be kind."},{"role":"user","content":"hi"}]})");
  // No system at all: none is made.
  EXPECT_EQ(chatOf(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a"}]})"),
            R"({"messages":[{"role":"user","content":"a"}]})");
}

TEST(AnthropicMessages, BlocksToParts) {
  // One text part collapses to a string; empty text blocks vanish; two parts stay a list.
  EXPECT_EQ(
      chatOf(R"({"model":"m","max_tokens":5,"messages":[
        {"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"one"}]},
        {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},
          {"type":"redacted_thinking","data":"x"},{"type":"text","text":"two"}]},
        {"role":"user","content":[{"type":"text","text":"look"},
          {"type":"image","source":{"type":"base64","data":"QUJD"}}]}]})"),
      R"({"messages":[{"role":"user","content":"one"},)"
      R"({"role":"assistant","reasoning":"hm","content":"two"},)"
      R"({"role":"user","content":[{"type":"text","text":"look"},)"
      R"({"type":"image_url","image_url":{"url":"data:image/jpeg;base64,QUJD"}}]}]})");
}

TEST(AnthropicMessages, ToolUseAndResults) {
  EXPECT_EQ(
      chatOf(R"({"model":"m","max_tokens":5,"messages":[
        {"role":"user","content":"weather?"},
        {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"get",
          "input":{"city":"Zürich","days":[1,2],"ok":true}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1",
          "content":[{"type":"text","text":"sun"},{"type":"text","text":"warm"}]}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"rain"},
          {"type":"text","text":"thanks"}]}],
        "tools":[{"name":"get","description":"Weather","input_schema":{"properties":{}}}]})"),
      // json.dumps: ", " and ": " separators, non-ASCII as \u00fc; the all-tool_result user
      // message is dropped after its tool message; a tool message precedes its user message.
      R"({"messages":[{"role":"user","content":"weather?"},)"
      R"({"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"get",)"
      R"("arguments":"{\"city\": \"Z\\u00fcrich\", \"days\": [1, 2], \"ok\": true}"}}]},)"
      R"({"role":"tool","tool_call_id":"t1","content":"sun\nwarm"},)"
      R"({"role":"tool","tool_call_id":"t2","content":"rain"},)"
      R"({"role":"user","content":"thanks"}],)"
      R"("tools":[{"type":"function","function":{"name":"get","description":"Weather",)"
      R"("parameters":{"properties":{},"type":"object"}}}]})");
}

// vLLM's current rules for Claude Code's roles, tool references and empty image sources.
TEST(AnthropicMessages, NewerRules) {
  EXPECT_EQ(
      chatOf(R"({"model":"m","max_tokens":5,"messages":[{"role":"ctx","content":"c"},
        {"role":"msg","content":[{"type":"text","text":"m"},{"type":"image","source":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[
          {"type":"tool_reference","tool_name":"grep"},{"type":"tool_reference","name":"ls"},
          {"type":"image"},{"type":"text"}]}]}]})"),
      R"({"messages":[{"role":"user","content":"c"},{"role":"user","content":"m"},)"
      R"({"role":"tool","tool_call_id":"t","content":""},)"
      R"({"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,"}}]},)"
      R"({"role":"tool","tool_call_id":"t","content":[{"type":"tool_reference","name":"grep"},)"
      R"({"type":"tool_reference","name":"ls"}]}]})");
}

TEST(AnthropicMessages, PyDumps) {
  EXPECT_EQ(pyDumps(ojson::parse(R"({"b":1,"a":[null,false,"\u00e9\n"],"c":{}})")),
            R"({"b": 1, "a": [null, false, "\u00e9\n"], "c": {}})");
  EXPECT_EQ(pyDumps(ojson::parse(R"("\ud83d\ude00")")), R"("\ud83d\ude00")");
}

// Bodies the engine refuses (and a digit-string max_tokens, which pydantic would take but the
// conversion does not): not converted, never thrown.
TEST(AnthropicMessages, RefusesWhatItDoesNotConvert) {
  for (
      const char* body : {
          R"([])",
          R"({"max_tokens":5,"messages":[]})",                // no model
          R"({"model":"m","messages":[]})",                   // no max_tokens
          R"({"model":"m","max_tokens":0,"messages":[]})",    // max_tokens 0
          R"({"model":"m","max_tokens":"5","messages":[]})",  // a string
          R"({"model":"m","max_tokens":5,"messages":{}})",    // not a list
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user"}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":5}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[5]}]})",
          R"({"model":"m","max_tokens":5,"messages":[],"tools":[{"input_schema":{}}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":)"
          R"([{"type":"tool_result","content":[{"type":"text","text":"x"}]}]}]})",
          "not json",
          // a member of another type than the engine's model declares (nlohmann's value()
          // would throw on each of these)
          R"({"model":"m","max_tokens":5,"system":[{"type":1}],"messages":[]})",
          R"({"model":"m","max_tokens":5,"system":[{"type":"text","text":5}],"messages":[]})",
          R"({"model":"m","max_tokens":5,"system":{"a":1},"messages":[]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"tool","content":"x"}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":1}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":"u"}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":3}}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"data":[]}}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":1}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","input":[1]}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":{}}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":2}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":null}]}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"image","source":7}]}]}]})",
          R"({"model":"m","max_tokens":5,"messages":[],"tools":[{"name":"t","input_schema":[]}]})",
          R"({"model":"m","max_tokens":5,"messages":[],"tools":[{"name":"t","description":5,"input_schema":{}}]})",
      }) {
    ChatForm f = toChat(body, false);
    EXPECT_FALSE(f.ok) << body;
    EXPECT_FALSE(f.error.empty()) << body;
  }
  // count_tokens needs no max_tokens.
  EXPECT_TRUE(toChat(R"({"model":"m","messages":[{"role":"user","content":"a"}]})", true).ok);
  // Deep nesting is refused before it is parsed.
  std::string deep = R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a"}],"x":)";
  for (int i = 0; i < 1000; ++i) deep += '[';
  for (int i = 0; i < 1000; ++i) deep += ']';
  deep += '}';
  EXPECT_FALSE(toChat(deep, false).ok);
}

TEST(AnthropicMessages, Errors) {
  EXPECT_STREQ(errorType(400), "invalid_request_error");
  EXPECT_STREQ(errorType(401), "authentication_error");
  EXPECT_STREQ(errorType(403), "permission_error");
  EXPECT_STREQ(errorType(404), "not_found_error");
  EXPECT_STREQ(errorType(413), "request_too_large");
  EXPECT_STREQ(errorType(429), "rate_limit_error");
  EXPECT_STREQ(errorType(502), "api_error");
  EXPECT_STREQ(errorType(503), "overloaded_error");
  EXPECT_STREQ(errorType(504), "timeout_error");
  EXPECT_STREQ(errorType(422), "invalid_request_error");
  EXPECT_EQ(errorBody("rate_limit_error", "slow \"down\""),
            R"({"type":"error","error":{"type":"rate_limit_error","message":"slow \"down\""}})");
}

}  // namespace
}  // namespace kvgate::engines::anthropic
