// The mode-4 fullproxy data plane: worker threads, VIP listeners, routing snapshots.
//
// Thread-per-core: N workers, each with its own io_context and its own SO_REUSEPORT acceptor per
// VIP:port, so a client connection and its upstream legs stay on one thread. The control thread
// calls apply() with the full rule set; listeners for new VIP:ports are bound first (a bind
// failure leaves everything as it was), then the new snapshots are published and listeners of
// removed VIP:ports are closed.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "config/rule.h"
#include "endpoints/endpoint.h"
#include "http/asio.h"
#include "proxy/route_table.h"
#include "proxy/rule_stats.h"

namespace kvgate::proxy {

struct ProxyOptions {
  int workers = 0;                                          // 0 = one per core
  size_t max_head_bytes = 16 * 1024;                        // larger request heads get 431
  size_t max_body_bytes = 32 * 1024 * 1024;                 // larger bodies get 413
  std::chrono::milliseconds header_timeout{10000};          // head must arrive within (408)
  std::chrono::milliseconds client_idle_timeout{60000};     // keep-alive idle (inactiveTimeOut)
  std::chrono::milliseconds upstream_data_timeout{600000};  // default timeoutMemberData (504)
  std::chrono::milliseconds upstream_idle_timeout{30000};   // pooled connection max idle age
  size_t max_idle_per_endpoint = 256;
  bool access_log = false;
  size_t prefix_key_bytes = 1024;  // K: rendered-prompt bytes in the CHWBL prefix key
  std::chrono::milliseconds probe_interval{5000};  // active health probe period
  std::chrono::milliseconds probe_timeout{2000};   // unless the rule sets probeTimeout
  endpoints::HealthOptions health;                 // breaker and passive detection
};

class Worker;
struct Listener;

class DataPlane {
 public:
  explicit DataPlane(ProxyOptions opts);
  ~DataPlane();
  void start();
  void stop();
  // Installs the complete rule set (control thread only).
  Result<void> apply(const std::vector<config::RuleSpec>& rules);
  const ProxyOptions& options() const { return opts_; }
  // Prometheus text for every data-plane family (control thread only, like apply()).
  std::string renderMetrics() const;

 private:
  std::shared_ptr<endpoints::EndpointState> endpointState(const std::string& ip, uint16_t port);
  ProxyOptions opts_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::map<std::string, std::shared_ptr<Listener>> listeners_;  // by vip:port
  std::map<std::string, std::shared_ptr<endpoints::EndpointState>> endpoint_states_;
  std::map<std::string, std::shared_ptr<RuleStats>> rule_stats_;  // by rule key
  DataPlaneStats stats_;
  std::unique_ptr<class Prober> prober_;
  size_t rule_count_ = 0;
  bool started_ = false;
};

}  // namespace kvgate::proxy
