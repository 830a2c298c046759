// AiRequests: loxilb_ai_requests_total{model,tenant,status,outcome} and
// loxilb_ai_active_streams{model} (upstream-gateway.md §2.7), for every request the data plane
// answers.
//
// outcome: completed (an engine's answer relayed in full, any status, or the gateway's own
// success such as /v1/models), denied (a governance or admission gate refused: API key, JWT,
// model authorization, quota, the policy store, P/D admission; the status the client got),
// failed (the gateway answered an error of its own: bad request, 408, 413, no route, upstream
// unreachable; or the engine's answer broke off), cancelled (the client left before the answer
// ended; status "0" when nothing was sent). The caller chooses the model label
// (proxy/exchange_io.cc aiModelLabel).
//
// Labels come from clients (model) and credentials (tenant): the first kMaxModels models and
// kMaxTenants tenants seen get their own values, later ones are counted as "_other"; a label is
// cut at 128 bytes on a character boundary and any byte that is not well-formed UTF-8, or is a
// control character, becomes '?' (Prometheus refuses a whole scrape over one invalid label).
// Beyond kMaxSeries request series, new ones count as model and tenant "_other" with the
// status's class (200, 400, ...): at most kMaxSeries + 40 series. Counting is one atomic add when a
// worker thread counts the same series as its last request (a thread-local hint, keyed by the
// table's id), else a mutex-guarded map lookup; series are never erased, so the hint's pointer
// stays valid.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

namespace kvgate::metrics {

enum class AiOutcome : uint8_t { kCompleted, kDenied, kFailed, kCancelled };
const char* aiOutcomeName(AiOutcome o);

class AiRequests {
 public:
  static constexpr size_t kMaxModels = 256, kMaxTenants = 1024, kMaxSeries = 8192;
  static constexpr size_t kMaxModelBytes = 128;

  void count(std::string_view model, std::string_view tenant, int status, AiOutcome outcome);
  // The open-streams gauge of `model` (+1 now; the returned counter is decremented by the caller
  // when the stream ends: StreamHold).
  std::atomic<int64_t>& streamOpened(std::string_view model);
  // Both families, Prometheus text (any thread).
  std::string render() const;

 private:
  struct Key {
    std::string model, tenant;
    int status;
    AiOutcome outcome;
    bool operator<(const Key& o) const {
      return std::tie(model, tenant, status, outcome) <
             std::tie(o.model, o.tenant, o.status, o.outcome);
    }
  };
  std::string modelLabel(std::string_view model);    // (mu_ held)
  std::string tenantLabel(std::string_view tenant);  // (mu_ held)
  static inline std::atomic<uint64_t> next_id_{1};
  const uint64_t id_ = next_id_.fetch_add(1);  // (the thread-local hint's owner)
  mutable std::mutex mu_;
  std::set<std::string, std::less<>> models_, tenants_;
  std::map<Key, std::unique_ptr<std::atomic<uint64_t>>> requests_;
  std::map<std::string, std::unique_ptr<std::atomic<int64_t>>, std::less<>> streams_;
};

AiRequests& aiRequests();  // the process's table

// RAII: one open stream of a model, closed on every path.
class StreamHold {
 public:
  StreamHold() = default;
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  ~StreamHold() { release(); }
  void open(AiRequests& t, std::string_view model) {
    release();
    g_ = &t.streamOpened(model);
  }
  void release() {
    if (g_) g_->fetch_sub(1, std::memory_order_relaxed);
    g_ = nullptr;
  }

 private:
  std::atomic<int64_t>* g_ = nullptr;
};

}  // namespace kvgate::metrics
