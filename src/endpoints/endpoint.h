// Endpoint live state shared by every snapshot and worker thread.
//
// Shared mutable state (documented as ARCHITECTURE.md asks): the counters below are atomics
// written by the worker threads on the request path and read by selectors and metrics. The
// same EndpointState object survives rule updates as long as the endpoint (ip:port) stays in some
// rule; endpoints/endpoint_table.h owns them and gives each a stable EndpointId.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "endpoints/prefill_rate.h"
#include "endpoints/admission_queue.h"
#include "endpoints/controller.h"
#include "endpoints/health.h"

namespace kvgate::endpoints {

// Stable identity of one upstream endpoint (never reused within a process; 0 = none).
using EndpointId = uint32_t;

// The distinct KV blocks of the requests in flight on an endpoint (block fingerprints with a
// reference count), for the Dynamo re-implementation's decode term (routing/stages/
// selection_law.h): only rules using that law add to it. A mutex, held for the map updates and
// lookups only, never across I/O.
class ActiveBlockSet {
 public:
  void add(const std::vector<uint64_t>& chain) {
    std::lock_guard<std::mutex> g(mu_);
    for (uint64_t k : chain) ++refs_[k];
  }
  void remove(const std::vector<uint64_t>& chain) {
    std::lock_guard<std::mutex> g(mu_);
    for (uint64_t k : chain) {
      auto it = refs_.find(k);
      if (it != refs_.end() && --it->second == 0) refs_.erase(it);
    }
  }
  // The distinct blocks there would be with `chain` added.
  uint64_t unionSize(const uint64_t* chain, size_t n) const {
    std::lock_guard<std::mutex> g(mu_);
    uint64_t extra = 0;
    for (size_t i = 0; i < n; ++i) extra += refs_.count(chain[i]) ? 0 : 1;
    return refs_.size() + extra;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, uint32_t> refs_;
};

struct EndpointState {
  EndpointState(EndpointId id_, std::string ip_, uint16_t port_, const common::Clock& clock)
      : id(id_),
        ip(std::move(ip_)),
        port(port_),
        label(ip.find(':') != std::string::npos ? "[" + ip + "]:" + std::to_string(port)
                                                : ip + ":" + std::to_string(port)),
        clock(clock),
        health(clock) {}
  const EndpointId id;
  const std::string ip;
  const uint16_t port;
  const std::string label;  // "ip:port" for logs and metrics

  const common::Clock& clock;      // (the health windows' and the last pick's)
  std::atomic<int64_t> active{0};  // requests in flight through this gateway
  // When a request was last given to it (its lease taken): predict-q's miss rule sends a prompt
  // nobody holds, among equally queued endpoints, to the one picked least recently, whose queued
  // prefill started first.
  std::atomic<int64_t> last_pick_ns{0};
  std::atomic<int64_t> queued{0};  // requests the admission gate parked for this endpoint
  AdmissionQueue admission;        // those requests, first come first served
  ActiveBlockSet active_set;       // their distinct blocks (rules with the dynamo law only)
  // Uncached prompt blocks (and tokens) of those requests that have not received a first
  // response byte yet: the prefill queued there by this gateway (streamed requests Tier 1.5 keyed,
  // single-pool rules).
  std::atomic<int64_t> pending_prefill_blocks{0};
  std::atomic<int64_t> pending_prefill_tokens{0};
  PrefillRate prefill_rate;  // tokens/s, estimated from those requests' first bytes
  std::atomic<int64_t> active_streams{0};  // its answers relayed as event streams now
  // Of those, the ones whose first body byte (first token) was relayed: past their prefill, now
  // decoding (the predict laws' decode weight).
  std::atomic<int64_t> started_streams{0};
  std::atomic<uint64_t> requests{0};  // requests sent
  std::atomic<uint64_t> connect_failures{0};
  Health health;  // probe result, passive detection, circuit breaker

  // Engine load signals (proxy/load_scraper.h: the worker's /metrics, endpoints of kvExactMode
  // rules). -1 / 0 = unknown.
  std::atomic<int64_t> kv_capacity_scraped{0};   // vllm:cache_config_info num_gpu_blocks
  std::atomic<int64_t> kv_capacity_override{0};  // the endpoint's kvCapacityBlocks field
  std::atomic<int64_t> engine_running{-1}, engine_waiting{-1};
  std::atomic<int64_t> kv_usage_ppm{-1};  // KV-cache usage, parts per million
  std::atomic<uint64_t> scrapes_ok{0}, scrapes_failed{0};
  std::atomic<bool> scrape_fresh{false};  // the last scrape succeeded (the values above are now)
  // The external controller's last word (endpoints/controller.h); interval 0 = none.
  std::atomic<int> ctl_state{0};
  std::atomic<int64_t> ctl_weight_milli{1000};
  std::atomic<int64_t> ctl_updated_ns{0};
  std::atomic<int64_t> ctl_interval_ns{0};
  ControllerView controller(int64_t now_ns) const {
    return controllerView(
        static_cast<ControllerState>(ctl_state.load(std::memory_order_relaxed)),
        static_cast<double>(ctl_weight_milli.load(std::memory_order_relaxed)) / 1000.0,
        ctl_updated_ns.load(std::memory_order_relaxed),
        ctl_interval_ns.load(std::memory_order_relaxed), now_ns);
  }
  // KV capacity in blocks for the selection law: the override, else the scraped value, else 0.
  double kvCapacity() const {
    const int64_t o = kv_capacity_override.load(std::memory_order_relaxed);
    return static_cast<double>(o > 0 ? o : kv_capacity_scraped.load(std::memory_order_relaxed));
  }
};

}  // namespace kvgate::endpoints
