// Engine load scraping: one coroutine per endpoint of a kvExactMode rule (or of a rule whose
// selector is smg, which reads the engines' queues) on worker 0's event loop,
// GET /metrics on the endpoint's serving port every LOXILB_KV_METRICS_INTERVAL_MS (default 1000;
// 0 disables), parsed by engines/engine_metrics.h into the endpoint's state: KV capacity in blocks
// (the Tier 1.5 selection law's capacity_i; an endpoint's kvCapacityBlocks field overrides it),
// engine running / waiting requests and KV usage (metrics). Bounds: timeout 1 s (connect, send
// and read together), answer at most kMaxBody bytes (a larger one is a failed scrape); failures
// keep the last values and are counted. The seed scales capacity by its external controller's
// weight, not by the endpoint's `weight` (a traffic share): kvgate uses capacity as scraped.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "config/rule.h"
#include "endpoints/endpoint.h"
#include "http/asio.h"
#include "http/tls.h"

namespace kvgate::proxy {

struct ScrapeSpec {
  std::shared_ptr<endpoints::EndpointState> ep;
  std::chrono::milliseconds timeout{1000};
  std::shared_ptr<http::TlsFiles> tls;  // a security 2 rule's TLS to its engines (null: plain)
  std::string tls_name;                 // the endpoint's domainName, else its IP
};

constexpr size_t kMaxScrapeBody = 4 * 1024 * 1024;

// Scrape specs for every endpoint of the kvExactMode 1/3 rules and the smg-selector rules; also sets each endpoint's
// capacity override from its kvCapacityBlocks field. `tls_of`: a rule's TLS to its engines.
std::vector<ScrapeSpec> scrapeSpecs(
    const std::vector<config::RuleSpec>& rules,
    const std::vector<std::shared_ptr<endpoints::EndpointState>>& eps,
    const std::function<std::shared_ptr<http::TlsFiles>(const config::RuleSpec&)>& tls_of = {});

class LoadScraper {
 public:
  LoadScraper(asio::io_context& io, std::chrono::milliseconds interval)
      : io_(io), interval_(interval) {}
  ~LoadScraper() { stop(); }
  void update(std::vector<ScrapeSpec> specs);  // on io_'s thread
  void stop();
  // One scrape (exposed for tests): true when the answer was read and applied to the endpoint.
  static asio::awaitable<bool> scrapeOnce(const ScrapeSpec& s);

 private:
  struct Task {
    ScrapeSpec spec;
    std::atomic<bool> stopped{false};
  };
  static asio::awaitable<void> run(std::shared_ptr<Task> t, std::chrono::milliseconds interval);
  asio::io_context& io_;
  std::chrono::milliseconds interval_;
  std::vector<std::shared_ptr<Task>> tasks_;
};

}  // namespace kvgate::proxy
