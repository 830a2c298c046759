// The InferenceCache messages to and from the index's plain types: one place for what a client's
// message may carry (bounds, clamps), shared by the gRPC service and the fuzz target.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "hints/hint_index.h"
#include "hints/lookup.h"
#include "inferencecache/v1alpha1/inferencecache.pb.h"

namespace kvgate::hints {

// What one CacheStateUpdate may carry: prefixes past this many blocks in all are dropped
// (counted in `dropped`, the Ack says PARTIAL), so one message cannot hold the index's exclusive
// lock for long or push it far past maxEntries before eviction runs.
inline constexpr size_t kMaxBlocksPerUpdate = 65536;

// `wall_now_us`: the wall clock, to turn the producer's timestamp_us into an age.
UpdateIn toUpdate(const inferencecache::v1alpha1::CacheStateUpdate& m, int64_t wall_now_us,
                  uint64_t& dropped);

// A lookup over the request's fields (views into `req`, valid while it lives; the chain's views
// in `blocks`). Returns false, without copying the chain, when it has more blocks than
// LookupLimits allows (the caller answers NO_HINT).
bool toLookup(const inferencecache::v1alpha1::LookupRouteRequest& req,
              std::vector<std::string_view>& blocks, LookupRequest& q);

// PublishEvent: the event applied to the index (probe tenant ignored, unknown types refused).
IngestResult applyEvent(HintIndex& index, const inferencecache::v1alpha1::CacheEvent& ev);

}  // namespace kvgate::hints
