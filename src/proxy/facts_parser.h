// The one parser of request bodies on the data plane: JSON bytes -> routing::RequestFacts.
//
// simdjson on-demand over the receive buffer itself (the caller reserves SIMDJSON_PADDING
// readable bytes past the body: no copy). Only the facts in `needs` are extracted; other fields
// are skipped. Memory: each worker thread keeps one parser whose capacity is capped at
// kKeepParserBytes; a larger body is parsed and the parser then shrinks back, so one huge
// request does not pin ~6x its size for the life of the process.
//
// Outcomes: kOk (a JSON object; facts filled as far as their shapes allow), kNotObject (valid
// JSON, not an object: no facts), kInvalidJson (not JSON: the only case the gateway answers 400
// invalid_json), kTooLarge (over kMaxParseBytes: not parsed, routed without facts). A body whose
// fields have unexpected shapes is still kOk, without those facts; so is a string the validator
// rejects only for its escapes (a lone UTF-16 surrogate, which Python's json accepts: the engine
// decides); a key the validator cannot decode is skipped with its value (it is none of ours).
// "model", "cache_salt" and "user" longer than kMaxFactString are not facts. Where the model
// cannot be read exactly as the engine will (repeated, undecodable, too long, a walk stopped
// part-way, a body over kMaxParseBytes), RequestFacts::model_ambiguous says so.
#pragma once
#include <cstddef>
#include <cstdint>

#include "routing/request_facts.h"

namespace kvgate::proxy {

enum class FactsStatus { kOk, kNotObject, kInvalidJson, kTooLarge };

constexpr size_t kFactsPadding = 64;                 // == SIMDJSON_PADDING (checked in the .cc)
constexpr size_t kKeepParserBytes = 1024 * 1024;     // parser capacity kept between requests
constexpr size_t kMaxParseBytes = 64 * 1024 * 1024;  // larger bodies are not parsed
constexpr size_t kMaxFactString = 4096;              // longest model / cache_salt / user kept

constexpr size_t kDefaultChatMaxBytes = 256 * 1024;  // twice the tokenizer's default text bound

// `capacity`: readable bytes from `data` (at least len + kFactsPadding; else the body is copied).
// `prefix_bytes`: K, the rendered-prompt budget of the prompt prefix. `chat_max_bytes`: the
// largest chat input (kNeedMessages: "messages" and the template's other members, about their
// JSON bytes) converted into RequestFacts::chat; a larger one is not (chat_too_large), as the
// tokenizer would not render it (ProxyOptions::chat_max_bytes, from its bound).
FactsStatus parseFacts(const char* data, size_t len, size_t capacity, uint32_t needs,
                       size_t prefix_bytes, routing::RequestFacts& out,
                       size_t chat_max_bytes = kDefaultChatMaxBytes);

// Bytes the calling thread's parser holds now (tests and the parser-memory bound).
size_t factsParserCapacity();

}  // namespace kvgate::proxy
