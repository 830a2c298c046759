// The Anthropic Messages API as the engines serve it (`POST /v1/messages`,
// `POST /v1/messages/count_tokens`; vLLM's vllm/entrypoints/anthropic/serving.py,
// AnthropicServingMessages, and SGLang's anthropic/serving.py). The engine turns a Messages
// request into a chat-completions request and renders that with the model's chat template, so
// the gateway (Tier 1.5 keys, the quota's prompt estimate) and the simulator build the same chat
// form from the same rules:
//
// - system: the top-level "system" (a string, or the text of its non-empty text blocks) and the
//   text of every role "system" message, joined with "" into one first {"role":"system"}
//   message; a text block starting "x-anthropic-billing-header" is dropped (vLLM: a per-request
//   hash that would defeat prefix caching). SGLang joins with "\n" (not modelled).
// - each other message keeps its role; a string content stays; a block list becomes: text
//   blocks (non-empty) -> {"type":"text"} parts, image -> {"type":"image_url"} (base64 as a data
//   URI, media type image/jpeg when absent), thinking -> "reasoning" (joined with ""),
//   tool_use -> "tool_calls" ({id, type "function", function {name, arguments: Python's
//   json.dumps of input}}), a user's tool_result -> a {"role":"tool","tool_call_id",content}
//   message placed before it (list content: its text items joined with "\n"; its images as a
//   following user message); one text part alone becomes a string content; a user message left
//   with no content is dropped.
// - tools -> [{"type":"function","function":{"name","description","parameters"}}];
//   chat_template_kwargs (vLLM's extension) passed on. tool_choice steers decoding, not the
//   template: not part of the form.
// - required: "model" (a string), "messages" (a list of objects with a string role and a string
//   or list content), and for /v1/messages "max_tokens" (an integer > 0; pydantic also takes a
//   digit string, which is not converted here).
//
// Not modelled (the request is then not converted: the gateway routes it without a prompt key):
// an assistant's tool_result whose content is not a string (vLLM renders Python's str() of it).
//
// Errors on these paths are Anthropic-shaped: {"type":"error","error":{"type","message"}}.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace kvgate::engines::anthropic {

// The Messages path a target names, by its path (a query ignored): kMessages for
// ".../v1/messages", kCountTokens for ".../v1/messages/count_tokens", else kNone.
enum class Path { kNone, kMessages, kCountTokens };
Path pathOf(std::string_view target);

struct ChatForm {
  bool ok = false;
  std::string error;           // why the body is not a request the engine accepts (ok false)
  nlohmann::ordered_json chat;  // {"messages":[...]} plus "tools", "chat_template_kwargs"
};
// A request body as a JSON object (nesting bounded first, no exception); nullopt with `f`
// failed (its error set) when it is not one. (Shared by the APIs' conversions.)
std::optional<nlohmann::ordered_json> parseObject(std::string_view body, ChatForm& f);

// The chat-completions form of a Messages request body (`count_tokens`: max_tokens optional).
ChatForm toChat(std::string_view body, bool count_tokens);
// The same from a parsed body (the simulator parses it once for its own checks).
ChatForm toChatForm(const nlohmann::ordered_json& request, bool count_tokens);

// Python's json.dumps(value) with its defaults: ", " and ": " separators, ensure_ascii, keys in
// insertion order. (Floats: nlohmann's shortest round-trip form, which can differ from Python's
// repr in the exponent's spelling.)
std::string pyDumps(const nlohmann::ordered_json& value);

// Anthropic's error type for an HTTP status: 400 invalid_request_error, 401
// authentication_error, 402 billing_error, 403 permission_error, 404 not_found_error, 413
// request_too_large, 429 rate_limit_error, 503 and 529 overloaded_error, 408 and 504
// timeout_error, other 4xx invalid_request_error, other 5xx api_error.
const char* errorType(int status);
// {"type":"error","error":{"type":<type>,"message":<message>}}
std::string errorBody(std::string_view type, std::string_view message);

}  // namespace kvgate::engines::anthropic
