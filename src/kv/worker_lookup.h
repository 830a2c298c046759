// WorkerLookup: the index workers (bits) holding the inventory of each KV-event publisher key
// ("host:port"). The event plane implements it; Tier 1.5 takes one snapshot per decision on the
// request path, so snapshot() must be cheap and safe to call from any thread.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace kvgate::kv {

using WorkerMap = std::map<std::string, uint64_t>;  // publisher key -> worker bits

class WorkerLookup {
 public:
  virtual ~WorkerLookup() = default;
  virtual std::shared_ptr<const WorkerMap> snapshot() const = 0;  // never null
};

}  // namespace kvgate::kv
