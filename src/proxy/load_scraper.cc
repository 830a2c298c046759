// LoadScraper: see load_scraper.h.
#include "proxy/load_scraper.h"

#include <cmath>
#include <set>

#include "common/log.h"
#include "engines/engine_metrics.h"
#include "http/chunked.h"
#include "http/parser.h"

namespace kvgate::proxy {

std::vector<ScrapeSpec> scrapeSpecs(const std::vector<config::RuleSpec>& rules,
                                    const std::vector<std::shared_ptr<endpoints::EndpointState>>& eps) {
  std::vector<ScrapeSpec> out;
  std::set<const endpoints::EndpointState*> seen;
  for (const auto& r : rules) {
    const int mode = r.service_args.is_object() ? r.service_args.value("kvExactMode", 0) : 0;
    if (mode != 1 && mode != 3) continue;
    for (const auto& e : r.endpoints) {
      std::shared_ptr<endpoints::EndpointState> st;
      for (auto& s : eps)
        if (s->ip == e.ip && s->port == e.port) st = s;
      if (!st) continue;
      const int64_t cap = e.json.is_object() ? e.json.value("kvCapacityBlocks", int64_t{0}) : 0;
      st->kv_capacity_override.store(cap, std::memory_order_relaxed);
      if (!seen.insert(st.get()).second) continue;
      out.push_back(ScrapeSpec{st});
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
  auto ex = co_await asio::this_coro::executor;
  tcp::socket sock(ex);
  Deadline d(ex);
  d.start([&sock] {
    error_code ec;
    sock.close(ec);
  });
  d.expireAfter(s.timeout);
  error_code ec;
  co_await sock.async_connect(tcp::endpoint(asio::ip::make_address(s.ep->ip, ec), s.ep->port),
                              useEc(ec));
  if (ec) co_return false;
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: " + s.ep->label +
                          "\r\nUser-Agent: kvgate-scrape\r\nAccept: text/plain\r\n"
                          "Connection: close\r\n\r\n";
  co_await asio::async_write(sock, asio::buffer(req), useEc(ec));
  std::string buf;
  char tmp[16384];
  http::ResponseHead rh;
  http::ParseError perr;
  int hn = 0;
  while (!ec && (hn = http::parseResponseHead(buf.data(), buf.size(), 16384, "GET", rh, perr)) == 0) {
    size_t n = co_await sock.async_read_some(asio::buffer(tmp), useEc(ec));
    buf.append(tmp, n);
  }
  if (hn <= 0 || rh.status != 200) co_return false;
  std::string raw = buf.substr(static_cast<size_t>(hn)), body;
  http::ChunkedScanner chunked;
  bool done = false;
  auto take = [&](const char* p, size_t n) {
    if (rh.body_kind == http::BodyKind::kChunked) {
      auto st = chunked.feed(p, n, &body);
      if (st.error) return false;
      done = st.done;
    } else {
      body.append(p, n);
      done = rh.body_kind == http::BodyKind::kLength && body.size() >= rh.content_length;
    }
    return body.size() <= kMaxScrapeBody;
  };
  if (rh.body_kind == http::BodyKind::kLength && rh.content_length > kMaxScrapeBody) co_return false;
  if (!take(raw.data(), raw.size())) co_return false;
  while (!done) {
    size_t n = co_await sock.async_read_some(asio::buffer(tmp), useEc(ec));
    if (n > 0 && !take(tmp, n)) co_return false;
    if (ec) break;  // EOF ends an until-close body; a short length or chunked body fails below
  }
  d.stop();
  if (!done && rh.body_kind != http::BodyKind::kUntilClose) co_return false;
  if (rh.body_kind == http::BodyKind::kLength) body.resize(rh.content_length);
  const engines::EngineLoad load = engines::parseEngineMetrics(body);
  auto& ep = *s.ep;
  if (load.num_gpu_blocks) ep.kv_capacity_scraped.store(*load.num_gpu_blocks);
  if (load.running) ep.engine_running.store(std::llround(*load.running));
  if (load.waiting) ep.engine_waiting.store(std::llround(*load.waiting));
  if (load.kv_usage) ep.kv_usage_ppm.store(std::llround(std::min(*load.kv_usage, 1.0) * 1e6));
  co_return true;
}

asio::awaitable<void> LoadScraper::run(std::shared_ptr<Task> t, std::chrono::milliseconds interval) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  bool failing = false;
  while (!t->stopped.load()) {
    const bool ok = co_await scrapeOnce(t->spec);
    if (t->stopped.load()) break;
    (ok ? t->spec.ep->scrapes_ok : t->spec.ep->scrapes_failed).fetch_add(1);
    if (!ok && !failing)
      log::info("scrape", "GET /metrics of " + t->spec.ep->label +
                              " failed; the selection law keeps its last KV capacity");
    failing = !ok;
    timer.expires_after(interval);
    error_code ec;
    co_await timer.async_wait(useEc(ec));
  }
}

}  // namespace kvgate::proxy
