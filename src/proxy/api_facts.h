// Request APIs other than OpenAI's, read as their engines read them (internal to src/proxy).
//
// apiOf: the API a request's path names (request_ctx.h Api): the Anthropic Messages API at
// .../v1/messages and .../v1/messages/count_tokens, the OpenAI Responses API at
// .../v1/responses, the pooling APIs (paths ending /embeddings, /rerank, /score, /classify,
// /pooling: vLLM's and SGLang's), else OpenAI-style (completions, chat and every other path).
//
// apiPromptFacts: the engine renders a Messages or Responses request as the chat-completions
// request it converts it to (engines/anthropic_messages.h: system first, blocks to parts, tool
// calls and results, tools; engines/openai_responses.h: instructions first, input items to
// messages, function tools). The prompt facts (the rendered prefix of Tier 1 keys, the messages
// and template inputs Tier 1.5 tokenizes, the rendered length the quota estimates from) are read
// from that chat form with the same facts parser, so a second turn keys exactly like its first
// and like the same conversation sent as chat. The body's own facts (model, cache_salt, stream,
// max_tokens) stay as its one parse read them. A body the engine would refuse, or one whose
// history is on the engine (previous_response_id), gives no prompt facts: the request is routed
// without a prompt key and the engine answers it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proxy/request_ctx.h"

namespace kvgate::proxy {

Api apiOf(std::string_view path);

// The facts that are the prompt's (what apiPromptFacts replaces).
constexpr uint32_t kPromptNeeds = routing::kNeedPromptPrefix | routing::kNeedMessages |
                                  routing::kNeedChatInput | routing::kNeedPromptRender |
                                  routing::kNeedPromptText | routing::kNeedPromptTokenIds;

// Bodies above this are not converted (counted too_large, routed without a prompt key): the
// conversion builds a DOM of the body, about 20x its size, on the event loop.
constexpr size_t kMaxConvertBytes = 2 * 1024 * 1024;

// The request-shape facts of a Messages (or count_tokens) body as its engine reads them: only
// max_tokens counts (the request has no n, max_completion_tokens or max_output_tokens), and a
// count_tokens request generates nothing (max_tokens 0).
void messagesShape(Api api, routing::RequestFacts& facts);
// The same for a pooling request (embeddings, rerank, ...): it generates nothing, so its
// reservation is its input alone.
void poolingShape(routing::RequestFacts& facts);
// The same for a Responses body: only max_output_tokens counts (no n, max_tokens or
// max_completion_tokens).
void responsesShape(routing::RequestFacts& facts);

// Replaces the prompt facts in rq.facts by those of the body's chat form (for the prompt
// needs among `needs`); no prompt facts when the body has no chat form or is over
// kMaxConvertBytes.
enum class Conversion { kConverted, kUnconvertible, kTooLarge };
Conversion apiPromptFacts(std::string_view body, uint32_t needs, size_t prefix_bytes,
                          size_t chat_max_bytes, RequestCtx& rq);

}  // namespace kvgate::proxy
