// Typed facts about one request that the routing decisions read, filled once by the data plane.
#pragma once
#include <cstdint>
#include <optional>

namespace kvgate::routing {

struct RequestContext {
  // XXH3 of model, cache_salt and the first K bytes of the rendered prompt (sel 8, 9, 10).
  std::optional<uint64_t> prefix_key;
  // Hash of the conversation id (X-Conversation-Id header, else the body's "user").
  std::optional<uint64_t> conversation_key;
  // Hash of the persist selector's session value (header, cookie:X or query:X); sel 3.
  std::optional<uint64_t> session_key;
  // Hash of the client's source address (sel 1; sel 3 without a session value).
  uint64_t source_key = 0;
};

// What a selector decided, for metrics and the access log.
struct PickInfo {
  const char* key = "rr";  // which key decided: prefix, conversation, session, source, rr
  bool spilled = false;    // a bounded-load selector moved off the key's home endpoint
};

}  // namespace kvgate::routing
