// The OpenAI Responses API as vLLM serves it (`POST /v1/responses`;
// vllm/entrypoints/openai/responses/utils.py construct_input_messages,
// construct_chat_messages_with_tool_call, construct_tool_dicts). vLLM renders a Responses request
// as the chat messages it builds from it, so the gateway (Tier 1.5 keys, the quota's estimate)
// and the simulator build the same chat form:
//
// - "instructions" (a non-empty string) -> a first {"role":"system"} message;
// - "input" a string -> one {"role":"user"} message; a list -> one message per item: a message
//   item ({"role":...,"content":...}, with or without "type":"message") as it is, except an
//   assistant one, which becomes {"role":"assistant","content":<its text, the first part's>};
//   "function_call" -> a tool call (id = call_id) added to the previous assistant message, or a
//   new one; "function_call_output" -> {"role":"tool","content":output,"tool_call_id":call_id};
//   "reasoning" -> the previous assistant message's reasoning (content's first text, else
//   summary's), or a new assistant message; an assistant text or reasoning item fills the
//   previous assistant message when it has none yet;
// - "tools": the function tools ({"type":"function","name","description","parameters",...}) as
//   chat tools {"type":"function","function":{"name","description","parameters",<the tool's
//   other members, such as strict>}} (absent description/parameters as null, as vLLM's model
//   dump has them); built-in tools are not rendered (a list of only built-in tools is an empty
//   tools list, no list is none);
// - a last message or reasoning item whose status is in_progress or incomplete is continued
//   (continue_final_message, no generation prompt); reasoning.effort reaches the template as
//   reasoning_effort.
//
// Not converted (the gateway routes the request without a prompt key, and the engine answers
// it): a request with "previous_response_id" (its history is stored on the engine that answered
// it, unseen by the gateway), an input item of another shape, a member of another type than the
// engine's model declares.
#pragma once
#include <string>
#include <string_view>

#include "engines/anthropic_messages.h"

namespace kvgate::engines::responses {

// POST .../v1/responses (a query ignored); GET .../v1/responses/{id} is not it.
bool isResponsesPath(std::string_view target);
// The stored response a request names by its path, as vLLM routes them: .../v1/responses/{id}
// (retrieve) and .../v1/responses/{id}/cancel (a query ignored); "" for any other path, and for
// an id of more than 256 bytes or of other characters than [A-Za-z0-9_-] (vLLM's ids are
// "resp_" and hex; an id the engine might read differently is not pinned, only routed).
std::string_view storedResponseIdOfPath(std::string_view target);
// The id of a path under .../v1/responses/{id} (itself or any path below it, such as
// .../{id}/cancel or .../{id}/input_items; a query ignored), with the same id rule; "" else.
std::string_view responseIdUnderPath(std::string_view target);
// The same for a request: a retrieve (GET or HEAD .../v1/responses/{id}) or a cancel (POST
// .../v1/responses/{id}/cancel); "" for another method.
std::string_view storedResponseRequestId(std::string_view method, std::string_view target);

using ChatForm = anthropic::ChatForm;
ChatForm toChat(std::string_view body);
ChatForm toChatForm(const nlohmann::ordered_json& request);

}  // namespace kvgate::engines::responses
