// WorkerLookup: the index workers (bits) holding the inventory of each KV-event publisher key
// ("host:port"). The event plane implements it; Tier 1.5 takes one snapshot per decision on the
// request path, so snapshot() must be cheap and safe to call from any thread.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <string>

namespace kvgate::kv {

// One publisher (all its DP ranks) as the request path sees it.
struct Publisher {
  uint64_t bits = 0;           // its index workers, one per rank
  int64_t connected_ns = -1;   // when every rank's subscriber was last connected (the event
                               // plane's clock); -1 while some rank is not connected
  bool contract_broken = false;  // its block hashes break the declared hash contract
};
using WorkerMap = std::map<std::string, Publisher>;  // publisher key -> its workers

// LoRA adapter names seen in the publishers' BlockStored events (their blocks live in the
// adapter's partition): a request whose model names one is scored in that partition.
using AdapterSet = std::set<std::string, std::less<>>;

class WorkerLookup {
 public:
  virtual ~WorkerLookup() = default;
  virtual std::shared_ptr<const WorkerMap> snapshot() const = 0;  // never null
  virtual std::shared_ptr<const AdapterSet> adapters() const {    // never null
    static const auto kNone = std::make_shared<const AdapterSet>();
    return kNone;
  }
};

}  // namespace kvgate::kv
