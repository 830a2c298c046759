// The LookupRoute service's metrics under inference-cache's names (shared/reference/
// inference-cache.md §5), plus kvgate's own ingest and index gauges; Prometheus text at scrape.
//
// Model labels come from clients: at most kMaxModels distinct values are kept, later ones are
// counted under model="other" (a hostile client cannot grow the exposition without bound).
#pragma once
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "hints/hint_index.h"
#include "hints/lookup.h"
#include "metrics/histogram.h"

namespace kvgate::hints {

class HintMetrics {
 public:
  static constexpr size_t kMaxModels = 256;
  HintMetrics();
  void lookup(std::string_view model, Reason reason, bool hint_used, double seconds);
  // Ingest: updates and events applied, prefix entries dropped, streams refused.
  std::atomic<uint64_t> updates{0}, update_entries{0}, update_dropped{0}, updates_refused{0},
      events{0}, events_refused{0}, policy_reloads{0}, policy_errors{0};
  // Messages protobuf refused to decode (a string field with invalid UTF-8, say): counted here
  // instead of a log line each, which a hostile client could otherwise flood.
  std::atomic<uint64_t> proto_errors{0};
  // Ingest calls refused by the index's ingest policy (hints/ingest_auth.h).
  std::atomic<uint64_t> ingest_unauthenticated{0}, ingest_not_loopback{0};
  std::string render(const HintIndex& index) const;

 private:
  struct PerModel {
    std::array<std::array<std::atomic<uint64_t>, 2>, kReasonCount> calls{};  // [reason][used]
    metrics::Histogram latency{0.1};  // 100 us .. 6 s
  };
  PerModel& slot(std::string_view model);
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<PerModel>> models_;
};

}  // namespace kvgate::hints
