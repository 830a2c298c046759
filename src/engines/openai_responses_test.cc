// The Responses API's chat form: expected values written by hand from vLLM's rules
// (vllm/entrypoints/openai/responses/utils.py construct_input_messages and
// _construct_message_from_response_item), not from the code under test.
#include "engines/openai_responses.h"

#include <gtest/gtest.h>

namespace kvgate::engines::responses {
namespace {

std::string chatOf(std::string_view body) {
  ChatForm f = toChat(body);
  EXPECT_TRUE(f.ok) << f.error;
  return f.chat.dump();
}

TEST(OpenAiResponses, Paths) {
  EXPECT_TRUE(isResponsesPath("/v1/responses"));
  EXPECT_TRUE(isResponsesPath("/x/v1/responses?stream=1"));
  EXPECT_FALSE(isResponsesPath("/v1/responses/resp_1"));
  EXPECT_FALSE(isResponsesPath("/v1/chat/completions"));
}

// vLLM's routes naming a stored response: GET /v1/responses/{id}, POST /v1/responses/{id}/cancel.
TEST(OpenAiResponses, StoredResponseIdOfPath) {
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/resp_1a2b"), "resp_1a2b");
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/resp_1a2b/cancel"), "resp_1a2b");
  EXPECT_EQ(storedResponseIdOfPath("/api/v1/responses/resp-X_9?stream=true&starting_after=3"),
            "resp-X_9");
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses"), "");
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/"), "");
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/cancel"), "");  // (the engine's id "cancel")
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/resp_1/input_items"), "");
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/resp_1/cancel/cancel"), "");
  EXPECT_EQ(storedResponseIdOfPath("/v1/chat/completions/resp_1"), "");
  EXPECT_EQ(storedResponseIdOfPath("/v2/responses/resp_1"), "");
  // Characters the engine might read differently: not an id the gateway pins on.
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/resp%5F1"), "");
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/resp.1"), "");
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/.."), "");
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/" + std::string(256, 'a')),
            std::string(256, 'a'));
  EXPECT_EQ(storedResponseIdOfPath("/v1/responses/" + std::string(257, 'a')), "");
}

TEST(OpenAiResponses, ResponseIdUnderPath) {
  EXPECT_EQ(responseIdUnderPath("/v1/responses/resp_1"), "resp_1");
  EXPECT_EQ(responseIdUnderPath("/v1/responses/resp_1/input_items?limit=2"), "resp_1");
  EXPECT_EQ(responseIdUnderPath("/x/v1/responses/resp_1/cancel"), "resp_1");
  EXPECT_EQ(responseIdUnderPath("/v1/responses"), "");
  EXPECT_EQ(responseIdUnderPath("/v1/responses/"), "");
  EXPECT_EQ(responseIdUnderPath("/v1/responses/resp%201"), "");
}

TEST(OpenAiResponses, StoredResponseRequestId) {
  EXPECT_EQ(storedResponseRequestId("GET", "/v1/responses/resp_1"), "resp_1");
  EXPECT_EQ(storedResponseRequestId("HEAD", "/v1/responses/resp_1"), "resp_1");
  EXPECT_EQ(storedResponseRequestId("POST", "/v1/responses/resp_1/cancel"), "resp_1");
  EXPECT_EQ(storedResponseRequestId("POST", "/v1/responses/resp_1"), "");  // (vLLM: 405)
  EXPECT_EQ(storedResponseRequestId("DELETE", "/v1/responses/resp_1"), "");
  EXPECT_EQ(storedResponseRequestId("GET", "/v1/responses/resp_1/cancel"), "");
}

TEST(OpenAiResponses, InstructionsAndStringInput) {
  EXPECT_EQ(chatOf(R"({"model":"m","instructions":"Be brief.","input":"hi"})"),
            R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]})");
  EXPECT_EQ(chatOf(R"({"input":"hi","instructions":""})"),
            R"({"messages":[{"role":"user","content":"hi"}]})");
}

TEST(OpenAiResponses, ItemsMergeIntoAssistantTurns) {
  // An assistant text, then its reasoning and two calls merge into one assistant message; a call
  // output is a tool message; a user message item keeps its parts (and its "type").
  EXPECT_EQ(
      chatOf(R"({"input":[
        {"type":"message","role":"user","content":[{"type":"input_text","text":"weather?"}],"id":"x"},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[]}]},
        {"type":"reasoning","summary":[{"type":"summary_text","text":"s"}],"content":[{"type":"reasoning_text","text":"need tool"}]},
        {"type":"function_call","call_id":"c1","name":"get","arguments":"{\"city\":\"Oslo\"}"},
        {"type":"function_call","call_id":"c2","name":"get","arguments":"{}"},
        {"type":"function_call_output","call_id":"c1","output":"sunny"},
        {"role":"assistant","content":"It is sunny."},
        {"type":"reasoning","summary":[{"text":"late"}]}]})"),
      R"({"messages":[{"type":"message","role":"user","content":[{"type":"input_text","text":"weather?"}]},)"
      R"({"role":"assistant","content":"Checking.","reasoning":"need tool","tool_calls":[)"
      R"({"id":"c1","function":{"name":"get","arguments":"{\"city\":\"Oslo\"}"},"type":"function"},)"
      R"({"id":"c2","function":{"name":"get","arguments":"{}"},"type":"function"}]},)"
      R"({"role":"tool","content":"sunny","tool_call_id":"c1"},)"
      R"({"role":"assistant","content":"It is sunny.","reasoning":"late"}]})");
  // A call with no assistant message before it starts one.
  EXPECT_EQ(chatOf(R"({"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"1"}]})"),
            R"({"messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"1"},"type":"function"}]}]})");
}

TEST(OpenAiResponses, FunctionToolsOnly) {
  EXPECT_EQ(
      chatOf(R"({"input":"x","tools":[{"type":"web_search"},
        {"type":"function","name":"get","parameters":{"type":"object"},"strict":true},
        {"type":"function","name":"now","description":"time"}]})"),
      R"({"messages":[{"role":"user","content":"x"}],"tools":[)"
      R"({"type":"function","function":{"name":"get","description":null,"parameters":{"type":"object"},"strict":true}},)"
      R"({"type":"function","function":{"name":"now","description":"time","parameters":null}}]})");
  // Only built-in tools: an empty tools list (the template sees tools, none of them a function).
  EXPECT_EQ(chatOf(R"({"input":"x","tools":[{"type":"web_search"}]})"),
            R"({"messages":[{"role":"user","content":"x"}],"tools":[]})");
}

TEST(OpenAiResponses, ContinuationAndEffort) {
  EXPECT_EQ(
      chatOf(R"({"input":[{"role":"user","content":"go"},
        {"type":"message","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"Once"}]}],
        "reasoning":{"effort":"low"}})"),
      R"({"messages":[{"role":"user","content":"go"},{"role":"assistant","content":"Once"}],)"
      R"("add_generation_prompt":false,"continue_final_message":true,)"
      R"("chat_template_kwargs":{"reasoning_effort":"low"}})");
  // A completed last item is answered as usual.
  EXPECT_EQ(chatOf(R"({"input":[{"role":"user","content":"go","status":"completed"}]})"),
            R"({"messages":[{"role":"user","content":"go"}]})");
}

TEST(OpenAiResponses, NotConverted) {
  for (const char* body : {
           R"({"input":"x","previous_response_id":"resp_1"})",  // history on the engine
           R"({"model":"m"})",                                  // no input
           R"({"input":5})",
           R"({"input":"x","instructions":7})",
           R"({"input":"x","model":3})",
           R"({"input":[5]})",
           R"({"input":[{"type":"image_generation_call"}]})",
           R"({"input":[{"role":"tool","content":"x"}]})",
           R"({"input":[{"role":"user"}]})",
           R"({"input":[{"type":"function_call","call_id":"c","name":"f"}]})",
           R"({"input":[{"type":"function_call","call_id":1,"name":"f","arguments":""}]})",
           R"({"input":[{"type":"function_call_output","call_id":"c","output":{}}]})",
           R"({"input":[{"type":"reasoning","encrypted_content":"xx"}]})",
           R"({"input":[{"type":"reasoning","content":[{"text":5}]}]})",
           R"({"input":[{"role":"assistant","content":[{"text":{}}]}]})",
           R"({"input":"x","tools":[{"type":"function"}]})",
           R"({"input":"x","tools":[{"type":"function","name":"f","parameters":[]}]})",
           R"({"input":"x","tools":{}})",
           R"({"input":"x","tools":[{"type":"namespace","name":"ns","tools":[]}]})",
           R"({"input":"x","reasoning":{"effort":3}})",
           "[]",
           "nope",
       }) {
    ChatForm f = toChat(body);
    EXPECT_FALSE(f.ok) << body;
    EXPECT_FALSE(f.error.empty()) << body;
  }
}

}  // namespace
}  // namespace kvgate::engines::responses
