#include "proxy/prober.h"

#include <openssl/ssl.h>

#include <set>

#include "common/log.h"
#include "common/net.h"
#include "http/fd_tls.h"
#include "http/parser.h"
#include "proxy/h2/probe.h"
#include "proxy/upstream_pool.h"

namespace kvgate::proxy {
namespace {

std::vector<std::pair<int, int>> parseCodes(const std::string& s) {
  std::vector<std::pair<int, int>> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t dash = item.find('-');
    uint64_t a = 0, b = 0;
    if (dash == std::string::npos) {
      if (net::parseUint(item, 599, a)) out.emplace_back(static_cast<int>(a), static_cast<int>(a));
    } else if (net::parseUint(item.substr(0, dash), 599, a) &&
               net::parseUint(item.substr(dash + 1), 599, b) && a <= b) {
      out.emplace_back(static_cast<int>(a), static_cast<int>(b));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (out.empty()) out.emplace_back(200, 200);
  return out;
}

}  // namespace

std::vector<ProbeSpec> probeSpecs(
    const std::vector<config::RuleSpec>& rules,
    const std::vector<std::shared_ptr<endpoints::EndpointState>>& eps,
    std::chrono::milliseconds default_timeout,
    const std::function<std::shared_ptr<http::TlsFiles>(const config::RuleSpec&)>& tls_of) {
  std::vector<ProbeSpec> out;
  std::set<const endpoints::EndpointState*> seen;
  for (const auto& r : rules) {
    std::string type = r.service_args.value("probetype", "");
    if (type.empty() || type == "none") continue;
    if (type != "http" && type != "https" && type != "tcp") continue;  // udp/sctp/ping: L4 only
    for (const auto& e : r.endpoints) {
      std::shared_ptr<endpoints::EndpointState> st;
      for (auto& s : eps)
        if (s->ip == e.ip && s->port == e.port) st = s;
      if (!st || !seen.insert(st.get()).second) continue;
      ProbeSpec p;
      p.ep = st;
      p.http = type != "tcp";
      int pp = r.service_args.value("probeport", 0);
      p.port = pp > 0 ? static_cast<uint16_t>(pp) : e.port;
      p.method = e.json.value("httpMethod", "");
      if (p.method.empty()) p.method = "GET";
      std::string path = e.json.value("urlPath", "");
      if (path.empty()) path = r.service_args.value("probereq", "");
      if (!path.empty() && path.front() == '/') p.path = path;
      p.expected = parseCodes(e.json.value("expectedCodes", "200"));
      int t = r.service_args.value("probeTimeout", 0);
      p.timeout = t > 0 ? std::chrono::milliseconds(t * 1000) : default_timeout;
      int retries = r.service_args.value("probeRetries", 0);
      p.retries = retries > 0 ? retries : 2;
      if (tls_of && p.http) p.tls = tls_of(r);
      // (a probe port of its own keeps HTTP/1.1: a health server beside the engine)
      p.protocol = pp > 0 && pp != e.port
                       ? BackendProtocol::kHttp1
                       : backendProtocolOf(r.service_args.value("backend_protocol", "http1"));
      p.tls_name = e.json.value("domainName", "");
      if (p.tls_name.empty()) p.tls_name = e.ip;
      out.push_back(std::move(p));
    }
  }
  return out;
}

void Prober::update(std::vector<ProbeSpec> specs) {
  std::set<endpoints::EndpointState*> probed;
  for (auto& s : specs) probed.insert(s.ep.get());
  for (auto& t : tasks_) {
    t->stopped.store(true);
    if (!probed.count(t->spec.ep.get())) t->spec.ep->health.setProbeUp(true);
  }
  tasks_.clear();
  for (auto& s : specs) {
    auto t = std::make_shared<Task>();
    t->spec = std::move(s);
    tasks_.push_back(t);
    asio::co_spawn(io_, run(t, interval_), asio::detached);
  }
}

void Prober::stop() {
  for (auto& t : tasks_) t->stopped.store(true);
  tasks_.clear();
}

namespace {

std::string_view alpnOf(http::FdTls& tls) {
  const unsigned char* p = nullptr;
  unsigned int n = 0;
  SSL_get0_alpn_selected(tls.native(), &p, &n);
  return std::string_view(reinterpret_cast<const char*>(p), p ? n : 0);
}

// The status of an HTTP/1.1 probe request on `conn` (0: no readable answer).
asio::awaitable<int> http1Status(http::SocketOrTls& conn, const ProbeSpec& s) {
  std::string req = s.method + " " + s.path + " HTTP/1.1\r\nHost: " + s.ep->label +
                    "\r\nUser-Agent: kvgate-probe\r\nConnection: close\r\n\r\n";
  error_code ec = co_await conn.write(req);
  std::string buf;
  char tmp[4096];
  http::ResponseHead rh;
  http::ParseError perr;
  int hn = 0;
  while (!ec &&
         (hn = http::parseResponseHead(buf.data(), buf.size(), 16384, s.method, rh, perr)) == 0) {
    const size_t n = co_await conn.readSome(tmp, sizeof tmp, ec);
    buf.append(tmp, n);
  }
  co_return hn > 0 ? rh.status : 0;
}

}  // namespace

asio::awaitable<std::optional<bool>> Prober::probeOnce(
    const ProbeSpec& s, std::chrono::steady_clock::time_point& http1_until) {
  auto ex = co_await asio::this_coro::executor;
  tcp::socket sock(ex);
  bool timed_out = false;
  Deadline d(ex);
  d.start([&sock, &timed_out] {
    timed_out = true;
    error_code ec;
    sock.close(ec);
  });
  d.expireAfter(s.timeout);
  error_code ec;
  const tcp::endpoint addr(asio::ip::make_address(s.ep->ip, ec), s.port);
  co_await sock.async_connect(addr, useEc(ec));
  if (acceptStarved(ec)) {  // no socket for want of descriptors or memory: ours, no verdict
    d.stop();
    co_return std::nullopt;
  }
  if (ec || !s.http) {
    d.stop();
    co_return !ec && !timed_out;
  }
  // TLS (security 2, probetype https): the handshake within the same timeout; HTTP/2 by ALPN
  // (h2 alone for http2, h2 then http/1.1 for both).
  const bool h2 =
      s.protocol == BackendProtocol::kHttp2 ||
      (s.protocol == BackendProtocol::kBoth && std::chrono::steady_clock::now() >= http1_until);
  const std::string_view alpn = !h2 ? std::string_view()
                                : s.protocol == BackendProtocol::kBoth
                                    ? std::string_view("\x02h2\x08http/1.1")
                                    : std::string_view("\x02h2");
  http::SocketOrTls conn{sock, nullptr, nullptr};
  if (s.tls)
    ec = co_await http::clientHandshake(sock, *s.tls, s.tls_name, conn.ctx, conn.tls, alpn);
  int status = 0;
  if (!ec && h2 && conn.tls && alpnOf(*conn.tls) != "h2") {
    // (the engine did not choose h2: HTTP/1.1 on this connection for both, a failure for http2)
    if (s.protocol == BackendProtocol::kBoth) status = co_await http1Status(conn, s);
  } else if (!ec && h2) {
    const h2::ProbeAnswer a =
        co_await h2::probeStatus(conn, s.method, s.path, s.ep->label, conn.tls != nullptr);
    status = a.status;
    // (cleartext only: over TLS the engine chose h2 by ALPN, and answering HTTP/1.1 there is a
    // failure, as requests see it: never a reason to probe without TLS)
    if (a.spoke_http1 && s.protocol == BackendProtocol::kBoth && !conn.tls && !timed_out) {
      // An HTTP/1.1 engine (it answered h2c's preface in HTTP/1.1): the probe on a new connection,
      // and the next ones in HTTP/1.1 for as long as the data plane's (UpstreamPool).
      http1_until = std::chrono::steady_clock::now() + UpstreamPool::kRelearnAfter;
      error_code cec;
      sock.close(cec);
      sock = tcp::socket(ex);
      co_await sock.async_connect(addr, useEc(ec));
      if (acceptStarved(ec)) {  // the gateway's shortage: no verdict
        d.stop();
        co_return std::nullopt;
      }
      http::SocketOrTls again{sock, nullptr, nullptr};
      if (!ec && !timed_out) status = co_await http1Status(again, s);
    }
  } else if (!ec) {
    status = co_await http1Status(conn, s);
  }
  d.stop();
  if (status == 0) co_return false;
  for (auto [lo, hi] : s.expected)
    if (status >= lo && status <= hi) co_return true;
  co_return false;
}

asio::awaitable<void> Prober::run(std::shared_ptr<Task> t, std::chrono::milliseconds interval) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  int failures = 0;
  while (!t->stopped.load()) {
    const std::optional<bool> verdict = co_await probeOnce(t->spec, t->http1_until);
    if (t->stopped.load()) break;
    auto& h = t->spec.ep->health;
    if (!verdict) {
      // The gateway's own shortage: the endpoint is neither up nor down for it.
    } else if (*verdict) {
      failures = 0;
      if (!h.probeUp()) log::info("health", t->spec.ep->label + " is up (probe passed)");
      h.setProbeUp(true);
    } else if (++failures >= t->spec.retries && h.probeUp()) {
      log::warn("health",
                t->spec.ep->label + " is down (" + std::to_string(failures) + " probes failed)");
      h.setProbeUp(false);
    }
    timer.expires_after(interval);
    error_code ec;
    co_await timer.async_wait(useEc(ec));
  }
}

}  // namespace kvgate::proxy
