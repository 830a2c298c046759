// RequestContext: the typed facts and keys the routing stages read, filled once per request by
// the data plane (proxy/request_keys.cc) from the RequestFacts, the request head and the client
// address. Plain data: no JSON, no sockets.
#pragma once
#include <atomic>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "routing/cycle_state.h"
#include "routing/request_facts.h"

namespace kvgate::routing {

struct RequestContext {
  const RequestFacts* facts = nullptr;  // null when nothing was parsed
  // What this request's routing computes once and shares (routing/cycle_state.h); the pipeline
  // lends a fresh one to a run that has none (tests, benchmarks).
  CycleState* cycle = nullptr;
  // XXH3 of model, cache_salt and the first K bytes of the rendered prompt (chwbl, gpuaware,
  // wrr_hash).
  std::optional<uint64_t> prefix_key;
  // Hash of the conversation id (X-Conversation-Id header, else the body's "user").
  std::optional<uint64_t> conversation_key;
  // Hash of the persist stage's session value (header, cookie:X or query:X).
  std::optional<uint64_t> session_key;
  // Hash of the client's source address (hash; persist without a session value).
  uint64_t source_key = 0;
};

// Which key decided a pick (metrics label `key`, access-log field `key`).
enum class DecisionKey : uint8_t {
  kPrefix,
  kConversation,
  kSession,
  kSource,
  kRr,
  kKvOverlap,
  kLoad,  // the least loaded endpoint, alone (min_load)
  kCount
};
inline constexpr const char* kDecisionKeyNames[] = {"prefix", "conversation", "session", "source",
                                                    "rr",     "kv_overlap",   "load"};
static_assert(std::size(kDecisionKeyNames) == static_cast<size_t>(DecisionKey::kCount));
inline const char* decisionKeyName(DecisionKey k) { return kDecisionKeyNames[static_cast<int>(k)]; }

// The affinity key of the prefix-keyed stages (chwbl, gpuaware, wrr_hash): the prefix key, else
// the conversation key, else the next value of a round-robin cursor advanced by `rr_step`.
inline uint64_t affinityKey(const RequestContext& ctx, std::atomic<uint64_t>& cursor,
                            uint64_t rr_step, DecisionKey& key) {
  if (ctx.prefix_key) {
    key = DecisionKey::kPrefix;
    return *ctx.prefix_key;
  }
  if (ctx.conversation_key) {
    key = DecisionKey::kConversation;
    return *ctx.conversation_key;
  }
  key = DecisionKey::kRr;
  return cursor.fetch_add(rr_step, std::memory_order_relaxed);
}

}  // namespace kvgate::routing
