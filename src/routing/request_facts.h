// RequestFacts: what one parse of an OpenAI-style request body tells every later stage.
//
// The data plane parses a body at most once per request (proxy/facts_parser.cc, simdjson over the
// receive buffer) and only for the facts some stage of the chosen rule, or the model-pool lookup,
// declares it needs (FactNeeds). Routing reads these plain fields and never sees JSON.
//
// A body that is valid JSON but not of the expected shape ("messages":"hi", "prompt":5, a
// non-object message) yields facts without the unusable parts (no prompt key, say): the request
// is routed without that key and the engine answers it. Only bytes that are not JSON at all are
// the gateway's 400 invalid_json.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kvgate::routing {

// Facts a stage (or the pool lookup) needs; the union over a rule's stages decides what is parsed.
enum FactNeeds : uint32_t {
  kNeedNothing = 0,
  kNeedModel = 1u << 0,           // body "model" (model pools)
  kNeedPromptPrefix = 1u << 1,    // rendered prompt, first K bytes, plus model and cache_salt
  kNeedUser = 1u << 2,            // body "user" (conversation id fallback)
  kNeedPromptText = 1u << 3,      // the whole prompt string (completions) / token ids
  kNeedMessages = 1u << 4,        // "messages" as a DOM (chat-template rendering)
  kNeedRequestShape = 1u << 5,    // stream, stream_options, max_tokens, adapter
  kNeedPromptTokenIds = 1u << 6,  // a token-id prompt's ids only (Tier 1.5), no text copy
  kNeedChatInput = 1u << 7,     // the chat-template fields besides messages, and add_special_tokens
  kNeedUserId = 1u << 8,        // body "user_id" (P/D Tier 0's session key)
  kNeedPromptRender = 1u << 9,  // the rendered prompt up to 16 KiB, and its whole length (Tier 1)
  kNeedResponseLink = 1u << 10,  // "previous_response_id", "request_id" (the Responses API's store)
  // Header and connection facts (no body parse): session value (persist), source address (hash).
  kNeedSession = 1u << 16,
  kNeedSource = 1u << 17,
};
constexpr uint32_t kBodyNeeds = 0xffffu;  // the bits above that require parsing the body

struct RequestFacts {
  bool parsed = false;     // the body was parsed and is a JSON object
  bool has_model = false;  // "model" was a string
  std::string model;       // body "model"
  // The body's model cannot be read exactly as the engine reads it: "model" appears more than
  // once (Python's json keeps the last, other parsers the first or refuse), its string could not
  // be decoded (a lone surrogate escape) or was longer than kMaxFactString, or the walk stopped
  // before the end of the object (a later "model" may follow). The gateway never authorizes,
  // meters or routes a pool on such a body (proxy/dispatch.cc answers 400 ambiguous_model).
  bool model_ambiguous = false;
  std::string cache_salt;  // vLLM "cache_salt": requests with different salts never share keys
  std::optional<std::string> user;     // body "user" (a string)
  std::optional<std::string> user_id;  // body "user_id" (a string, or an integer as decimal)
  std::string previous_response_id;    // body "previous_response_id" (a string; "" none)
  std::string response_request_id;     // a Responses body's "request_id" (vLLM: the new id)
  // Rendered prompt, at most K bytes: chat = per message: role, 0x1F, its text (a string, or
  // the concatenated "text" of its parts), 0x1E; completions = the prompt string, or token ids as
  // decimal numbers each followed by ','. Empty with has_prompt false when the body has no
  // usable prompt.
  bool has_prompt = false;
  std::string prompt_prefix;
  size_t prefix_key_len = SIZE_MAX;  // bytes of prompt_prefix the CHWBL prefix key covers (K)
  size_t prompt_render_total = 0;    // the whole rendered prompt's length (prompt_prefix is cut)
  size_t prompt_id_count = 0;        // a token-id prompt: how many ids (quota estimate)
  // Filled only for kNeedPromptText: the whole completions prompt, or its token ids (the ids also
  // for kNeedPromptTokenIds).
  std::string prompt_text;
  std::vector<int64_t> prompt_token_ids;
  // Filled only for kNeedMessages: the chat template's input, converted during the one walk of
  // the body: an object with "messages" (an array) and, for kNeedChatInput, the members a chat
  // template reads besides it (tools, documents, add_generation_prompt, continue_final_message,
  // add_special_tokens, chat_template_kwargs) in body order. Null when the body has no
  // "messages" array, or when converting it stopped (a value simdjson cannot decode, an integer
  // past 64 bits, nesting or size past the bounds: chat_too_large says which).
  std::shared_ptr<nlohmann::ordered_json> chat;
  bool chat_too_large = false;  // the conversion passed the data plane's chat bound
  bool hasChat() const { return chat != nullptr; }
  // Filled only for kNeedChatInput: add_special_tokens when it is a boolean (completions
  // tokenization).
  std::optional<bool> add_special_tokens;
  // Filled only for kNeedRequestShape.
  std::optional<bool> stream;
  bool include_usage = false;         // stream_options.include_usage
  bool has_stream_options = false;    // the body has a "stream_options" member
  std::string stream_options_json;    // its raw text (at most 4 KiB; else empty)
  std::optional<int64_t> max_tokens;  // the larger of max_tokens, max_completion_tokens and
                                      // max_output_tokens (the Responses API's)
  std::optional<int64_t> n;           // choices asked for
  // max_tokens, max_completion_tokens, max_output_tokens or n held a value the gateway cannot
  // read as the engine does (" 4", 4.5 as a string...): the quota reserves conservatively.
  bool counts_unreadable = false;
  // The last value of max_tokens, max_completion_tokens and max_output_tokens (the parser's;
  // max_tokens above is their maximum).
  std::array<std::optional<int64_t>, 3> count_fields;
  std::string lora_adapter;           // SGLang "lora_path" (vLLM selects adapters by "model")

  // Resets every fact, keeping the strings' capacity (facts are reused per connection).
  void clear() {
    parsed = has_model = model_ambiguous = has_prompt = include_usage = has_stream_options = false;
    counts_unreadable = false;
    count_fields = {};
    prompt_render_total = prompt_id_count = 0;
    model.clear();
    cache_salt.clear();
    user.reset();
    user_id.reset();
    prompt_prefix.clear();
    prompt_text.clear();
    prompt_token_ids.clear();
    chat.reset();
    chat_too_large = false;
    add_special_tokens.reset();
    stream.reset();
    max_tokens.reset();
    n.reset();
    stream_options_json.clear();
    lora_adapter.clear();
    previous_response_id.clear();
    response_request_id.clear();
  }
  // Frees strings that grew past `keep` bytes (one huge request must not pin its size for the
  // connection's life).
  void shrink(size_t keep) {
    chat.reset();  // (the chat input is the request's alone: not kept on an idle connection)
    for (std::string* s : {&model, &cache_salt, &prompt_prefix, &prompt_text, &lora_adapter,
                           &stream_options_json, &previous_response_id, &response_request_id})
      if (s->capacity() > keep) std::string().swap(*s);
    if (prompt_token_ids.capacity() * sizeof(int64_t) > keep)
      std::vector<int64_t>().swap(prompt_token_ids);
  }
};

}  // namespace kvgate::routing
