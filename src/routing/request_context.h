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

#include "routing/request_facts.h"

namespace kvgate::routing {

// What a request's prompt costs to compute, computed once per request and shared: its token ids
// (whoever needs them first tokenizes: the quota gate's count or kv_exact; the other reuses
// them, so a metered Tier 1.5 chat request is rendered and tokenized once), and kv_exact's chain,
// which a retry (the routing pipeline runs again after an endpoint fails) reuses instead of
// hashing again. Owned by the connection (capacity reused across requests); the connection
// clears it after each request.
struct ChainCache {
  std::vector<uint64_t> chain;
  bool ready = false;
  // Blocks of the prompt beyond the chain (a text cut before tokenizing, ids past kv_exact's
  // bound), estimated: uncached everywhere.
  uint32_t tail_blocks = 0;
  // PromptTokens::tokens()'s answer for this request's facts (tokens_ready: it was asked).
  std::vector<uint32_t> tokens;
  size_t tokens_cut = 0;  // ids the tokenizer's bound left out, estimated (PromptTokens::tokens)
  bool tokens_ready = false;
  bool tokens_ok = false;  // the answer was kOk
  void clear() {
    ready = false;
    tokens_ready = false;
    tokens_ok = false;
    tokens_cut = 0;
  }
  // The ids are not kept while the response streams (up to 4x the tokenizer's text bound per
  // request): routing calls this once it has decided (a later run that needs them asks again),
  // and the connection after every request, whichever path it took.
  void releaseTokens() {
    if (tokens.capacity() > 0) std::vector<uint32_t>().swap(tokens);
    tokens_ready = tokens_ok = false;
    tokens_cut = 0;
  }
};

// A remote LookupRoute answer for this request (kv_exact with kvIndexAddr): the stage sets
// kWanted with the chain in the chain cache; the proxy asks the index and fills the rest.
struct RemoteHint {
  enum class State : uint8_t { kNone, kWanted, kAnswered, kFailed };
  State state = State::kNone;
  bool timed_out = false;  // kFailed: the deadline passed (else an error)
  std::vector<std::pair<std::string, int32_t>> replicas;  // replica id ("ip:port"), matched tokens
  std::string reason_code;  // the index's reason code
};

struct RequestContext {
  const RequestFacts* facts = nullptr;  // null when nothing was parsed
  RemoteHint* remote = nullptr;         // null: this path cannot ask a remote index
  uint64_t run = 0;                     // a per-thread id of this request's routing (never 0)
  ChainCache* chain_cache = nullptr;    // null: nothing is kept between attempts
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
