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
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "config/rule.h"
#include "endpoints/endpoint_table.h"
#include "governance/services.h"
#include "http/asio.h"
#include "metrics/text.h"
#include "proxy/route_table.h"
#include "proxy/rule_stats.h"

namespace kvgate::http {
class TlsFiles;
}
namespace kvgate::tok {
class RequestTokenizer;
}
namespace kvgate::l4 {
class L4Plane;
}
namespace kvgate::telemetry {
class Tracer;
}

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
  uint64_t sockmap_min_bytes = 64 * 1024;  // sockMapMode: smaller bodies are relayed here
  size_t prefix_key_bytes = 1024;  // K: rendered-prompt bytes in the CHWBL prefix key
  // Largest chat input the facts parser converts for the chat template (twice the tokenizer's
  // text bound, LOXILB_KV_TOKENIZE_MAX_BYTES; proxy/facts_parser.h).
  size_t chat_max_bytes = 256 * 1024;
  int64_t quota_max_tokens = 256;  // completion tokens reserved when a request names no max_tokens
  std::chrono::milliseconds probe_interval{5000};   // active health probe period
  std::chrono::milliseconds probe_timeout{2000};    // unless the rule sets probeTimeout
  endpoints::HealthOptions health;                  // breaker and passive detection
  std::chrono::milliseconds drain_timeout{30000};   // SIGTERM: finish in-flight requests within
  std::chrono::milliseconds scrape_interval{1000};  // engine /metrics (kvExactMode rules); 0 = off
  const common::Clock* clock = nullptr;  // time for health and breaker rules (null = steady)
  std::shared_ptr<http::TlsFiles> tls;   // certificate of listeners with security 1 rules
  uint64_t max_heap_bytes = 0;     // the overload monitor's L (proxy/overload.h); 0 = off
  uint64_t heap_budget_bytes = 0;  // its C (the cgroup default only); 0 = none
  bool http2 = true;  // h2c by prior knowledge on plain listeners, h2 by ALPN on TLS ones (h2/)
  uint32_t h2_max_streams = 100;   // SETTINGS_MAX_CONCURRENT_STREAMS per HTTP/2 connection
  // OpenTelemetry spans (serve --otlp-endpoint; telemetry/tracer.h); null: no tracing at all.
  std::shared_ptr<telemetry::Tracer> tracer;
};

class Worker;
class LoadScraper;
struct Listener;

class DataPlane {
 public:
  explicit DataPlane(ProxyOptions opts);
  ~DataPlane();
  void start();
  void stop();
  // Installs the complete rule set (control thread only).
  Result<void> apply(const std::vector<config::RuleSpec>& rules);
  // The L4 data path for mode 0-3 and 5 rules (serve --l4-ifaces); before the first apply(). Unset:
  // those rules are refused (400). Must outlive the data plane.
  void setL4(l4::L4Plane* l4) { l4_ = l4; }
  // The L4 path's endpoint health from its rules' probes (probetype tcp, http, https: the same
  // prober as mode 4's, on worker 0), passive detection and, on rules with cb_enable, the
  // circuit breaker, both fed by the TCP connects the program saw (refused or unanswered:
  // failures; answered: a success): control thread, every second. Returns what changed.
  std::vector<std::string> syncL4Health();
  // The KV index and publisher lookup Tier 1.5 stages read (kvExactMode 3 rules); set before
  // start() (the overload monitor's thread reads the index's size). Both must outlive the data
  // plane.
  // `tokens` (may be null: no --models-dir) turns text and chat prompts into token ids.
  // `overlay` (may be null: speculative insert off) is written by the Tier 1.5 stages.
  void setKv(const kv::KvIndex* index, const kv::WorkerLookup* lookup,
             const routing::PromptTokens* tokens = nullptr,
             kv::SpeculativeOverlay* overlay = nullptr) {
    kv_index_ = index;
    kv_lookup_ = lookup;
    prompt_tokens_ = tokens;
    kv_overlay_ = overlay;
    setWorkerTokens(tokens);
  }
  // The models' tokenizers (serve --models-dir): /tokenize and /detokenize answered by the
  // gateway (tokenize_local.h). Before start().
  void setTokenizers(const tok::RequestTokenizer* t);
  // The governance services the request gates use (governance/services.h); before start().
  // Unset: the process-wide registries and the shared counters set when the plane was made.
  void setGovernance(const governance::Services& gov) { gov_ = gov; }
  // The environment's routing defaults (read once at start), the admission gate's LLB_FC_*
  // among them; before the first apply(). Must outlive the data plane. Unset: every default (no
  // environment variable is read).
  void setRoutingEnv(const routing::RoutingEnv* env) { routing_env_ = env; }
  const routing::RoutingEnv& routingEnv() const {
    return routing_env_ ? *routing_env_ : routing::defaultRoutingEnv();
  }
  const ProxyOptions& options() const { return opts_; }
  // Prometheus text for every data-plane family (control thread only, like apply()).
  std::string renderMetrics() const;
  // Graceful shutdown, step 1 (control thread): stop accepting, close idle client connections;
  // requests in flight finish. Poll idle() until true or the drain timeout, then stop().
  void drain();
  bool idle() const { return stats_.active_connections.load() == 0; }
  // The routing decisions the workers report while a dashboard watches (/ui).
  DecisionFeed& decisions() { return stats_.decisions; }
  bool draining() const { return stats_.draining.load(); }
  // Renewed certificate, client CA and CRL files (control thread, every second).
  void refreshTls();
  // The applied rule set's TLS client context to a rule's engines (null: plain; control thread).
  std::shared_ptr<http::TlsFiles> backendTlsFor(const config::RuleSpec& rule) const;

 private:
  Result<void> applyProxy(const std::vector<config::RuleSpec>& rules);  // the mode 4 rules
  ProxyOptions opts_;
  l4::L4Plane* l4_ = nullptr;
  void updateL4Probes(const std::vector<config::RuleSpec>& l4_rules);
  std::unique_ptr<class Prober> l4_prober_;  // the L4 rules' probes (made on first use)
  // "rule key|ip|port": each L4 rule's endpoints, judged by that rule's probes
  std::map<std::string, std::shared_ptr<endpoints::EndpointState>> l4_health_;
  std::string l4_probe_sig_;  // what the L4 probe tasks probe now
  std::set<std::string> l4_breaker_rules_;  // keys of the L4 rules with cb_enable
  const kv::KvIndex* kv_index_ = nullptr;
  const kv::WorkerLookup* kv_lookup_ = nullptr;
  const routing::PromptTokens* prompt_tokens_ = nullptr;
  kv::SpeculativeOverlay* kv_overlay_ = nullptr;
  const routing::RoutingEnv* routing_env_ = nullptr;
  governance::Services gov_ = governance::Services::processWide();  // (workers refer to it)
  DataPlaneStats stats_;  // before workers_: their pools and frames write it while destroyed
  endpoints::EndpointTable endpoints_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::map<std::string, std::shared_ptr<Listener>> listeners_;    // by vip:port
  std::map<std::string, std::shared_ptr<RuleStats>> rule_stats_;  // by rule key
  // Who owns each Responses API response any rule relayed (response_homes.h).
  std::shared_ptr<class ResponseHomes> response_owners_;
  std::unique_ptr<class ListenerTls> listener_tls_;
  std::unique_ptr<class OverloadMonitor> overload_;
  void renderRequestMetrics(metrics::TextWriter& w) const;
  void renderTier15Metrics(metrics::TextWriter& w) const;
  void renderRoutingMetrics(metrics::TextWriter& w) const;
  void renderEndpointMetrics(metrics::TextWriter& w) const;
  void buildPd(Route& route, const common::Clock& clock);
  void setWorkerTokens(const routing::PromptTokens* tokens);

 public:
  // The external controller (endpoints/controller.h; control thread): sets the state and weight
  // of each named endpoint with the controller's interval; returns the ip:port of those no rule
  // has. clearController() detaches it (every endpoint neutral). controllerView(): every
  // endpoint the controller spoke for, with its effective view now.
  struct ControllerUpdate {
    std::string ip;
    uint16_t port = 0;
    endpoints::ControllerState state = endpoints::ControllerState::kActive;
    double weight = 1.0;
  };
  std::vector<std::string> setController(const std::vector<ControllerUpdate>& updates,
                                         int64_t interval_ns);
  void clearController();
  std::string controllerJson() const;

 private:
  std::shared_ptr<Route> buildRoute(const config::RuleSpec& rule, const common::Clock& clock,
                                    std::set<std::string>& live_endpoints);
  Result<std::shared_ptr<Listener>> bindListener(const std::string& key, const tcp::endpoint& ep);
  void closeAcceptors(const std::vector<std::shared_ptr<tcp::acceptor>>& accs);
  void closeListener(Listener& l);
  std::unique_ptr<class Prober> prober_;
  std::unique_ptr<LoadScraper> scraper_;
  size_t rule_count_ = 0;
  bool started_ = false;
};

}  // namespace kvgate::proxy
