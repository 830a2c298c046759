// LoadScraper: see load_scraper.h.
#include "proxy/load_scraper.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "common/log.h"
#include "engines/engine_metrics.h"
#include "http/async_fetch.h"
#include "routing/rule_profile.h"
#include "routing/stage_registry.h"

namespace kvgate::proxy {

std::vector<ScrapeSpec> scrapeSpecs(
    const std::vector<config::RuleSpec>& rules,
    const std::vector<std::shared_ptr<endpoints::EndpointState>>& eps,
    const std::function<std::shared_ptr<http::TlsFiles>(const config::RuleSpec&)>& tls_of) {
  std::vector<ScrapeSpec> out;
  std::set<const endpoints::EndpointState*> seen;
  for (const auto& r : rules) {
    // Rules whose pipeline reads the engines' /metrics (each stage says so in its registry entry:
    // kv_exact's laws and profiles, the smg selector).
    bool wanted = false;
    for (const auto& name : routing::stageNames(r))
      if (const routing::StageInfo* s = routing::findStage(name); s && s->reads_engine_metrics)
        wanted = true;
    if (!wanted) continue;
    for (const auto& e : r.endpoints) {
      std::shared_ptr<endpoints::EndpointState> st;
      for (auto& s : eps)
        if (s->ip == e.ip && s->port == e.port) st = s;
      if (!st) continue;
      const int64_t cap = e.json.is_object() ? e.json.value("kvCapacityBlocks", int64_t{0}) : 0;
      st->kv_capacity_override.store(cap, std::memory_order_relaxed);
      if (!seen.insert(st.get()).second) continue;
      ScrapeSpec spec;
      spec.ep = st;
      if (tls_of) spec.tls = tls_of(r);
      spec.tls_name = e.json.is_object() ? e.json.value("domainName", "") : "";
      if (spec.tls_name.empty()) spec.tls_name = e.ip;
      out.push_back(std::move(spec));
    }
  }
  return out;
}

void LoadScraper::stop() {
  for (auto& t : tasks_) t->stopped.store(true);
  tasks_.clear();
}

void LoadScraper::update(std::vector<ScrapeSpec> specs) {
  stop();
  if (interval_.count() <= 0) return;
  for (auto& s : specs) {
    auto t = std::make_shared<Task>();
    t->spec = std::move(s);
    tasks_.push_back(t);
    asio::co_spawn(io_, run(t, interval_), asio::detached);
  }
}

asio::awaitable<bool> LoadScraper::scrapeOnce(const ScrapeSpec& s) {
  http::FetchResult r =
      co_await http::fetchAsync(s.ep->ip, s.ep->port, "GET", "/metrics", s.timeout, kMaxScrapeBody,
                                s.tls.get(), s.tls_name);
  if (!r.ok || r.status != 200) co_return false;
  const engines::EngineLoad load = engines::parseEngineMetrics(r.body);
  auto& ep = *s.ep;
  // Clamped before rounding: a hostile text cannot make a gauge overflow.
  auto round = [](double v, double hi) { return std::llround(std::clamp(v, 0.0, hi)); };
  if (load.num_gpu_blocks) ep.kv_capacity_scraped.store(*load.num_gpu_blocks);
  if (load.running) ep.engine_running.store(round(*load.running, 1e12));
  if (load.waiting) ep.engine_waiting.store(round(*load.waiting, 1e12));
  if (load.kv_usage) ep.kv_usage_ppm.store(round(*load.kv_usage * 1e6, 1e6));
  co_return true;
}

asio::awaitable<void> LoadScraper::run(std::shared_ptr<Task> t,
                                       std::chrono::milliseconds interval) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  bool failing = false;
  while (!t->stopped.load()) {
    const bool ok = co_await scrapeOnce(t->spec);
    if (t->stopped.load()) break;
    (ok ? t->spec.ep->scrapes_ok : t->spec.ep->scrapes_failed).fetch_add(1);
    t->spec.ep->scrape_fresh.store(ok, std::memory_order_relaxed);
    if (!ok && !failing)
      log::info("scrape", "GET /metrics of " + t->spec.ep->label +
                              " failed; the last values stay (the selection law's KV capacity; smg treats the endpoint as "
                              "reporting nothing until a scrape succeeds)");
    failing = !ok;
    timer.expires_after(interval);
    error_code ec;
    co_await timer.async_wait(useEc(ec));
  }
}

}  // namespace kvgate::proxy
