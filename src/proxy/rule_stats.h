// Per-rule and per-listener counters of the data plane. They outlive routing snapshots (kept by
// the DataPlane by rule key), so updating a rule does not reset them. Workers only touch atomics;
// the control thread creates entries in apply() and reads everything at scrape time.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "metrics/histogram.h"

namespace kvgate::proxy {

// One counter per HTTP status code 0..599 (exposition skips zeros).
struct StatusCounters {
  std::array<std::atomic<uint64_t>, 600> by_status{};
  void inc(int status) {
    if (status >= 0 && status < 600)
      by_status[static_cast<size_t>(status)].fetch_add(1, std::memory_order_relaxed);
  }
};

// Which key decided a selection (routing::PickInfo::key), as an index.
inline constexpr std::array<const char*, 5> kDecisionKeys = {"prefix", "conversation", "session",
                                                             "source", "rr"};

struct RuleStats {
  std::string rule;      // rule name, else its key
  std::string model;     // model_name ("" = catch-all)
  std::string selector;  // selector name
  std::map<std::string, std::unique_ptr<StatusCounters>> per_endpoint;  // by endpoint label
  StatusCounters no_endpoint;  // answered by the gateway after routing (no endpoint reachable)
  metrics::Histogram upstream_latency;
  metrics::Histogram stream_ttft;
  std::array<std::atomic<uint64_t>, kDecisionKeys.size()> decisions{};
  std::atomic<uint64_t> spills{0};
};

struct DataPlaneStats {
  std::atomic<int64_t> active_connections{0};
  std::atomic<int64_t> active_streams{0};
};

}  // namespace kvgate::proxy
