// Endpoint live state shared by every snapshot and worker thread.
//
// Shared mutable state (documented as ARCHITECTURE.md asks): the counters below are atomics
// written by the worker threads on the request path and read by selectors and metrics. The
// same EndpointState object survives rule updates as long as the endpoint (ip:port) stays in some
// rule; endpoints/endpoint_table.h owns them and gives each a stable EndpointId.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "endpoints/health.h"

namespace kvgate::endpoints {

// Stable identity of one upstream endpoint (never reused within a process; 0 = none).
using EndpointId = uint32_t;

struct EndpointState {
  EndpointState(EndpointId id_, std::string ip_, uint16_t port_, const common::Clock& clock)
      : id(id_),
        ip(std::move(ip_)),
        port(port_),
        label(ip.find(':') != std::string::npos ? "[" + ip + "]:" + std::to_string(port)
                                                : ip + ":" + std::to_string(port)),
        health(clock) {}
  const EndpointId id;
  const std::string ip;
  const uint16_t port;
  const std::string label;  // "ip:port" for logs and metrics

  std::atomic<int64_t> active{0};         // requests in flight through this gateway
  std::atomic<int64_t> active_blocks{0};  // their prompts' KV blocks (when Tier 1.5 keyed them)
  std::atomic<uint64_t> requests{0};      // requests sent
  std::atomic<uint64_t> connect_failures{0};
  Health health;  // probe result, passive detection, circuit breaker

  // Engine load signals (proxy/load_scraper.h: the worker's /metrics, endpoints of kvExactMode
  // rules). -1 / 0 = unknown.
  std::atomic<int64_t> kv_capacity_scraped{0};   // vllm:cache_config_info num_gpu_blocks
  std::atomic<int64_t> kv_capacity_override{0};  // the endpoint's kvCapacityBlocks field
  std::atomic<int64_t> engine_running{-1}, engine_waiting{-1};
  std::atomic<int64_t> kv_usage_ppm{-1};  // KV-cache usage, parts per million
  std::atomic<uint64_t> scrapes_ok{0}, scrapes_failed{0};
  // KV capacity in blocks for the selection law: the override, else the scraped value, else 0.
  double kvCapacity() const {
    const int64_t o = kv_capacity_override.load(std::memory_order_relaxed);
    return static_cast<double>(o > 0 ? o : kv_capacity_scraped.load(std::memory_order_relaxed));
  }
};

}  // namespace kvgate::endpoints
