// CachePolicy: the knobs of the LookupRoute service (kvgate index), read from a JSON policy file
// and reloadable without a restart (docs/hints.md lists every knob).
//
// Field names and defaults are inference-cache's CachePolicySpec (shared/reference/
// inference-cache.md §3): eviction LRU|LFU, evictionTTL 30m, minimumPrefixTokens off,
// minimumMatchedTokens 64, routingFloorScore "0.1", lookupTimeoutMs off, strategy
// {enableChainMatching true, requireChain false, enableTenantHot true}, affinityRouting Enabled.
// kvgate adds maxEntries (a bound on indexed (block, replica) pairs, default 8M) and blockSize
// (tokens per fingerprint block for token_ids and prompt_text, default 16). The file holds the
// spec itself or a CachePolicy resource with a "spec" member; unknown fields are refused, so a
// misspelt knob is an error rather than a silent default.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace kvgate::hints {

enum class Eviction { kLru, kLfu };

struct CachePolicy {
  Eviction eviction = Eviction::kLru;
  int64_t eviction_ttl_ms = 30 * 60 * 1000;
  int32_t minimum_prefix_tokens = 0;   // 0 = off
  int32_t minimum_matched_tokens = 64;  // 0 = off
  double routing_floor_score = 0.1;
  int64_t lookup_timeout_ms = 0;  // 0 = no server budget (the client's deadline still applies)
  bool enable_chain_matching = true;
  bool require_chain = false;
  bool enable_tenant_hot = true;
  bool affinity_routing = true;
  uint64_t max_entries = 8'000'000;
  uint32_t block_size = 16;
};

const char* evictionName(Eviction e);  // "lru" | "lfu" (the metric's algorithm label)

// Parses a policy document (JSON). Errors name the field.
Result<CachePolicy> parsePolicy(std::string_view json);
// A Go-style duration ("30m", "90s", "1h30m", "250ms"); positive, at most 30 days.
Result<int64_t> parseDurationMs(std::string_view s);
// routingFloorScore's string form: ^(0|[1-9][0-9]{0,7})(\.[0-9]{1,6})?$
Result<double> parseFloorScore(std::string_view s);

}  // namespace kvgate::hints
