// EventFeed: replicas whose cache state the index learns from their engines' KV events (ZeroMQ),
// read from the same kv::KvIndex the gateway's Tier 1.5 uses, beside the replicas that report
// through ReportCacheState. LookupRoute merges both: an event-fed replica matches the leading run
// of the request's chain it holds (its blocks are keyed by the XXH3 seed-1337 fingerprints the
// vllm scheme's block_hashes carry), fresh by construction (the engine announces removals), tier
// T1; it serves its declared scope for the distinguishing-power count, the miss classifier and
// affinity.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvgate::hints {

class EventFeed {
 public:
  struct Member {
    uint32_t replica;  // the HintIndex replica index (HintIndex::ensureReplica)
    uint64_t bits;     // its KV-index workers (one per data-parallel rank)
  };
  virtual ~EventFeed() = default;
  // The event-fed replicas of (tenant, model, scheme) holding at least one block.
  virtual void members(std::string_view tenant, std::string_view model, std::string_view scheme,
                       std::vector<Member>& out) const = 0;
  // For each member, the blocks of the leading run of `chain` it holds (out[i] for members[i]).
  virtual void runs(const uint64_t* chain, size_t n, const std::vector<Member>& members,
                    std::vector<uint32_t>& out) const = 0;
  // How much of (tenant, model, scheme) event-fed replicas holding blocks know: 0 not the
  // tenant, 1 the tenant, 2 also the model, 3 also the scheme.
  virtual int known(std::string_view tenant, std::string_view model,
                    std::string_view scheme) const = 0;
  virtual bool empty() const = 0;  // no event-fed replica holds a block
};

}  // namespace kvgate::hints
