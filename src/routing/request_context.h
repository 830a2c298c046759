// Typed facts about one request that the routing decisions read, filled once by the data plane.
#pragma once
#include <atomic>
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

// The affinity key of the prefix-keyed selectors (chwbl, gpuaware, wrr-hash): the prefix key,
// else the conversation key, else the next value of a round-robin cursor advanced by `rr_step`.
inline uint64_t affinityKey(const RequestContext& ctx, std::atomic<uint64_t>& cursor,
                            uint64_t rr_step, PickInfo& info) {
  if (ctx.prefix_key) {
    info.key = "prefix";
    return *ctx.prefix_key;
  }
  if (ctx.conversation_key) {
    info.key = "conversation";
    return *ctx.conversation_key;
  }
  info.key = "rr";
  return cursor.fetch_add(rr_step, std::memory_order_relaxed);
}

}  // namespace kvgate::routing
