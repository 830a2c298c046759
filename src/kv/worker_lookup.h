// WorkerLookup: the index workers (bits) holding the inventory of a KV-event publisher key
// ("host:port"). The event plane implements it; Tier 1.5 reads it on the request path, so an
// implementation must be cheap and safe to call from any thread.
#pragma once
#include <cstdint>
#include <string>

namespace kvgate::kv {

class WorkerLookup {
 public:
  virtual ~WorkerLookup() = default;
  virtual uint64_t workersOf(const std::string& source_key) const = 0;  // 0 = not followed
};

}  // namespace kvgate::kv
