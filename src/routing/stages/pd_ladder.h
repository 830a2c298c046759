// The stages of the P/D ladder (seed 000): a P/D rule's prefill pick runs session (Tier 0) ->
// [prefix_trie (Tier 1, pd_cache_aware_mode)] -> [kv_exact (Tier 1.5, kvExactMode 1)] ->
// min_load (Tier 2), over the prefill endpoints (ep_role 1) that are not masked (down, breaker
// open, failed for this request); its decode pick is the session's pinned decode endpoint when
// usable, else min_load over the decode endpoints (ep_role 2). A rule's `pdLadder` lists the
// prefill stages itself (config/rule.cc checks it: session first, min_load last, in step with
// kvExactMode 1 and pd_cache_aware_mode); without session nothing is pinned and the data plane
// takes the controller's DRAINING endpoints out before any stage.
#pragma once
#include <memory>

#include "routing/stage.h"

namespace kvgate::routing {

// The reasons each falls through with.
inline constexpr FallReason kSessionReasons[] = {FallReason::kAllExcluded, FallReason::kEmptyPool,
                                                 FallReason::kNoKey, FallReason::kUnpinned,
                                                 FallReason::kPinEvicted};
inline constexpr FallReason kPrefixTrieReasons[] = {
    FallReason::kAllExcluded, FallReason::kEmptyPool, FallReason::kNoKey, FallReason::kImbalance,
    FallReason::kNoWorker,    FallReason::kShallow,   FallReason::kExcluded};

std::unique_ptr<Stage> makeSession(const StageServices& s);     // session (Tier 0): session.cc
std::unique_ptr<Stage> makePrefixTrie(const StageServices& s);  // prefix_trie (Tier 1)
std::unique_ptr<Stage> makeMinLoad(const StageServices& s);     // min_load (Tier 2): min_load.cc


}  // namespace kvgate::routing
