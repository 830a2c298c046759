// EngineFeed: `kvgate index` following engines' KV events directly (replicas with an "events"
// address in --replicas): the gateway's own event plane (events::EventPlane: ZMQ SUB, sequence
// gaps, replay, decoding) writing the same kv::KvIndex Tier 1.5 reads, exposed to LookupRoute as
// an EventFeed. Fingerprints come from the token ids in the events (XXH3-64 seed 1337), so they
// are the block_hashes a vllm-scheme caller sends, whatever hash the engine itself runs.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "events/event_plane.h"
#include "hints/event_feed.h"
#include "hints/hint_index.h"
#include "hints/pd_topology.h"
#include "kv/kv_index.h"

namespace kvgate::hints {

class EngineFeed final : public EventFeed {
 public:
  // Registers every replica with an events address in `index`; start() opens the subscribers.
  EngineFeed(HintIndex& index, const PdTopology& topology, events::EventPlaneOptions opts = {});
  ~EngineFeed() override;
  bool any() const { return !subs_.empty(); }
  void start();
  void stop();
  std::string renderMetrics() const { return plane_->renderMetrics(); }

  void members(std::string_view tenant, std::string_view model, std::string_view scheme,
               std::vector<Member>& out) const override;
  void runs(const uint64_t* chain, size_t n, const std::vector<Member>& members,
            std::vector<uint32_t>& out) const override;
  int known(std::string_view tenant, std::string_view model,
            std::string_view scheme) const override;
  bool empty() const override;

 private:
  struct Sub {
    ReplicaConfig cfg;
    uint32_t replica;  // HintIndex replica index
    std::string key;   // the event plane's source key (host:port)
  };
  uint64_t bitsOf(const Sub& s, const kv::WorkerMap& map) const;
  bool holds(uint64_t bits) const;
  std::vector<Sub> subs_;
  kv::KvIndex kv_;
  std::unique_ptr<events::EventPlane> plane_;
};

// "tcp://host:port" or "host:port" -> the event plane's source spec.
Result<events::SourceSpec> sourceOf(const ReplicaConfig& r);

}  // namespace kvgate::hints
