// A routing stage: one step of a rule's pipeline (routing/pipeline.h).
//
// A stage looks at the request's context and the candidate endpoints, and either picks one or
// falls through with a reason; it may also exclude candidates, and every later stage honours
// that. Stages are pure decisions over plain data (no sockets, no JSON, no globals): whatever
// they need (clock, the rule's pool, later the KV index and the session table) is handed to
// their factory as StageServices. Each stage file opens with its algorithm and knobs.
#pragma once
#include <cstdint>
#include <iterator>
#include <memory>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "config/rule.h"
#include "config/stage_catalog.h"
#include "endpoints/endpoint.h"
#include "routing/prompt_tokens.h"
#include "routing/request_context.h"
#include "routing/routing_env.h"

namespace kvgate::kv {
class KvIndex;
class WorkerLookup;
class SpeculativeOverlay;
}  // namespace kvgate::kv

namespace kvgate::routing {

class SessionTable;
class PrefixTrie;

// One endpoint of a rule's pool, as the stages see it.
struct PoolEndpoint {
  std::shared_ptr<endpoints::EndpointState> state;  // stable identity: state->id
  uint8_t weight = 1;
  int role = 0;
};

// The endpoints a stage may choose from: `excluded[i]` true means endpoint i must not be picked
// (down, breaker open, already failed for this request, or excluded by an earlier stage).
struct CandidateSet {
  const std::vector<PoolEndpoint>& endpoints;
  std::vector<bool>& excluded;
  size_t size() const { return endpoints.size(); }
  bool anyLeft() const {
    for (bool x : excluded)
      if (!x) return true;
    return false;
  }
};

// The seed's P/D ladder tier a stage stands for (config/stage_catalog.h says which; nothing
// outside a stage matches stage names).
using Ladder = config::LadderTier;

// Why a stage did not decide (metrics label `reason`).
enum class FallReason : uint8_t {
  kAllExcluded,
  kEmptyPool,
  kNoKey,
  // kv_exact (Tier 1.5) guards, in ladder order (stages/kv_exact.h):
  kApiMode,       // the request's API (chat or completions) is not the rule's kvExactApiMode
  kWarmup,        // no candidate's subscriber has been connected for kvWarmupSec yet
  kTextEmpty,     // no prompt: neither token ids, nor text, nor messages
  kModelEmpty,    // a text prompt without a model (no tokenizer to choose)
  kTokenize,      // tokenizer not loaded (yet), missing or failing for the request
  kHashes,        // token ids out of range: no block hashes
  kHashContract,  // every followed candidate's events break the declared hash contract
  kNoWorker,  // no candidate's cache holds any leading block of the prompt (or none is followed)
  kExcluded,  // only excluded candidates (down, breaker open, failed) hold the prompt's blocks
  kShallow,   // the best overlap is under the minimum matched tokens, or under one block
  // P/D ladder (stages/pd_ladder.h):
  kUnpinned,    // session: the conversation has no live pin
  kPinEvicted,  // session: a pinned endpoint is gone, masked, down or behind an open breaker
  kImbalance,   // prefix_trie: prefill loads differ by more than pd_balance_abs_threshold
  // kv_exact with kvIndexAddr (a remote LookupRoute):
  kRemoteTimeout,  // the index did not answer within kvIndexTimeoutMs
  kRemoteError,    // the call failed (unreachable, refused, malformed answer)
  kRemoteUnknown,  // the index answered UNKNOWN_TENANT/_MODEL/_HASH_SCHEME: the rule's tenant,
                   // model or scheme is not what the index holds (a configuration mismatch)
  kCount
};
inline constexpr const char* kFallReasonNames[] = {
    "all_excluded", "empty_pool", "no_key",      "api_mode",      "warmup",    "text_empty",
    "model_empty",  "tokenize",   "hashes",      "hash_contract", "no_worker", "excluded",
    "shallow",      "unpinned",   "pin_evicted", "imbalance",     "remote_timeout", "remote_error",
    "remote_unknown_key"};
static_assert(std::size(kFallReasonNames) == static_cast<size_t>(FallReason::kCount));
// The reasons of the selector stages (rr, chwbl, ...): an empty pool, or every candidate
// excluded, or no key (a prefix-keyed stage without a prompt). A stage with reasons of its own
// declares them beside its factory (kv_exact.h, pd_ladder.h) and its registry entry names them.
inline constexpr FallReason kSelectorReasons[] = {FallReason::kAllExcluded, FallReason::kEmptyPool,
                                                  FallReason::kNoKey};

struct StageResult {
  int index = -1;  // the chosen endpoint, or -1: fall through
  DecisionKey key = DecisionKey::kRr;
  bool spilled = false;      // a bounded-load stage moved off the key's home endpoint
  bool seeded = false;       // kv_exact diverted the pick to a cold endpoint (cold-start seeding)
  bool track_chain = false;  // kv_exact (dynamo law): add the chain to the endpoint's active set
  // kv_exact (ttft law): the pick's uncached blocks, queued there; on a fall (a miss), the blocks
  // any later stage's pick will have to prefill.
  uint32_t prefill_blocks = 0;
  // kv_exact's pick: the prompt's leading blocks its view credits to the chosen endpoint (the
  // index and speculative credits; -1: not a kv_exact pick).
  int32_t matched_blocks = -1;
  int peer = -1;  // session (P/D): the pinned decode endpoint, for the decode pick
  // kv_exact with kvIndexAddr: ask the remote index (RequestContext::remote) and run again.
  bool need_remote = false;
  FallReason reason = FallReason::kAllExcluded;

  static StageResult pick(int i, DecisionKey k = DecisionKey::kRr, bool spilled = false) {
    StageResult r;
    r.index = i;
    r.key = k;
    r.spilled = spilled;
    return r;
  }
  static StageResult fall(FallReason why) {
    StageResult r;
    r.reason = why;
    return r;
  }
};

class Stage {
 public:
  virtual ~Stage() = default;
  virtual StageResult evaluate(const RequestContext& ctx, CandidateSet& c) = 0;
  // The request facts this stage reads (routing/request_facts.h FactNeeds bits).
  virtual uint32_t needs() const { return kNeedNothing; }
  // After the pipeline decided (by any stage) on endpoint `chosen`, on the same thread, right
  // after this request's evaluate calls (kv_exact credits the prompt's blocks to it).
  virtual void observe(const RequestContext&, int /*chosen*/) {}
};

// What a stage factory receives. References stay valid for the stage's life (the Route owns
// the pool and the rule; the clock outlives the data plane).
struct StageServices {
  const common::Clock& clock;
  const config::RuleSpec& rule;
  const std::vector<PoolEndpoint>& endpoints;
  // The KV index and its publisher lookup (Tier 1.5); null when the gateway has no event plane.
  const kv::KvIndex* kv_index = nullptr;
  const kv::WorkerLookup* kv_lookup = nullptr;
  // Token ids of text and chat prompts (Tier 1.5); null when serve runs without --models-dir.
  const PromptTokens* prompt_tokens = nullptr;
  // Speculative insert (Tier 1.5): blocks credited to the endpoint just chosen; null = off.
  kv::SpeculativeOverlay* kv_overlay = nullptr;
  // P/D rules: Tier 0's pins and Tier 1's trie (kept with the rule's counters across updates).
  SessionTable* sessions = nullptr;
  PrefixTrie* trie = nullptr;
  // The environment's routing defaults, read once at start (routing_env.h); null = every default.
  const RoutingEnv* env = nullptr;
  const RoutingEnv& envOrDefault() const { return env ? *env : defaultRoutingEnv(); }
};

}  // namespace kvgate::routing
