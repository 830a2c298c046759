// The CHWBL prefix key (`chwbl_key`) and the conversation id, read from an OpenAI request body.
//
// Rendered prompt: chat = for each message in order, its role, 0x1F, its text (a string, or the
// concatenated "text" of its parts), 0x1E; completions = the prompt string, or the raw JSON of a
// token-id prompt. The key is XXH3-64 over model, 0x00, cache_salt, 0x00 and the first K bytes
// of the rendered prompt. K trades affinity against herding: a small K keys only the shared
// system prompt, so every conversation behind one preamble lands on one endpoint (maximal cache
// reuse of the preamble, but the bounded load must spill the excess); a large K separates
// conversations earlier, spreading load but losing reuse of shared preambles shorter than K.
// Default K = 1024 bytes (`serve --prefix-key-bytes`). Requests differing in model or cache_salt
// never share a key.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvgate::routing {

struct BodyKeys {
  bool json_ok = false;
  std::string model;  // the body's "model" (used to find the pool)
  std::optional<uint64_t> prefix_key;
  std::optional<std::string> user;  // the body's "user" field (conversation id fallback)
};

BodyKeys computeBodyKeys(std::string_view body, size_t prefix_bytes);

}  // namespace kvgate::routing
