// LookupRoute's decision: which replicas hold the request's prefix warm, ranked, with a reason.
//
// Order (issue 13 / shared/reference/inference-cache.md §2; upstream's deviations noted in
// docs/hints.md):
//   reserved probe tenant -> NO_HINT; empty hash_scheme -> NO_HINT; requireChain without a valid
//   chain -> POLICY_REQUIRES_CHAIN; deadline past -> TIMEOUT; input resolution (explicit chain
//   or prefix_hash, else token_ids, else prompt_text; a malformed chain fails open to NO_HINT);
//   the match: a chain request walks its leading run (PREFIX_MATCH or straight to the miss
//   classifier), an exact request looks its key up, then TENANT_HOT; UNKNOWN_TENANT /
//   UNKNOWN_MODEL / UNKNOWN_HASH_SCHEME on a miss against a non-empty index; the
//   minimumPrefixTokens downgrade; the minimumMatchedTokens floor (per replica, >=) and the
//   routingFloorScore floor (top score, strictly below drops all); then AFFINITY_HINT when
//   enabled, else NO_HINT. The server's budget (lookupTimeoutMs) covers the whole call, so an
//   over-budget answer is TIMEOUT.
// Ranking v2 (float32, in this order): matched_tokens x freshness x pressure factor x SLO bias,
// then x distinguishing power: freshness = max(0, 1 - age/evictionTTL) of the oldest block of
// the run; pressure factor = clamp(1 - pressure, 0, 1) from stats reported within the TTL;
// SLO bias = 1 + freshness when 0 < ttft_ms < 200; distinguishing power = 1 - m/T with T the
// replicas serving (tenant, model, scheme) and m those matching at least as deep (1 when T <= 1).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hints/hint_index.h"

namespace kvgate::hints {

enum class Reason : uint8_t {
  kPrefixMatch,
  kTenantHot,
  kAffinityHint,
  kNoHint,
  kPolicyRequiresChain,
  kTimeout,
  kUnknownTenant,
  kUnknownModel,
  kUnknownHashScheme,
};
inline constexpr int kReasonCount = 9;
const char* reasonName(Reason r);  // the wire string, e.g. "PREFIX_MATCH"

inline constexpr std::string_view kProbeTenant = "inferencecache.io/probe";

// The request as it arrived (views into the decoded message).
struct LookupRequest {
  std::string_view model, tenant, scheme, adapter;
  std::string_view prefix_hash;
  int32_t prefix_token_count = 0;
  const std::string_view* block_hashes = nullptr;  // n_blocks of them
  size_t n_blocks = 0;
  const int32_t* block_token_counts = nullptr;
  size_t n_counts = 0;
  const uint32_t* token_ids = nullptr;
  size_t n_tokens = 0;
  std::string_view prompt_text;
  int32_t ttft_ms = 0;
};

struct ScoreOut {
  std::string replica;
  float score = 0;
  int32_t matched_tokens = 0;
  float prob = 0;
  uint8_t tier = 0;  // CacheTier
};

struct LookupOutcome {
  Reason reason = Reason::kNoHint;
  std::vector<ScoreOut> scores;
  std::vector<uint32_t> echoed_tokens;  // only when the server tokenized prompt_text
  bool echo_adapter = false;
};

// Tokenizes prompt_text as one user message with the generation prompt; nullopt when the
// server has no tokenizer for the model (the lookup fails open).
using PromptTokenizer =
    std::function<std::optional<std::vector<uint32_t>>(std::string_view model,
                                                       std::string_view text)>;

struct LookupLimits {
  size_t max_tokens = size_t(1) << 20;
  size_t max_prompt_bytes = size_t(1) << 20;
  size_t max_blocks = 65536;  // longer chains fail open (128 MiB of hashes is not a prompt)
};

// deadline_ns: on the index's clock; 0 = none. `budget_deadline_ns` marks the server's own
// lookupTimeoutMs budget (also a TIMEOUT when passed by the end).
LookupOutcome lookupRoute(const HintIndex& index, const LookupRequest& req,
                          const PromptTokenizer& tokenize, int64_t deadline_ns,
                          const LookupLimits& limits = {});

}  // namespace kvgate::hints
