// Active health probes: one coroutine per probed endpoint on worker 0's event loop.
//
// A rule's `probetype` http (or https) sends
// `<httpMethod or GET> <urlPath, else probereq, else /health>` to `probeport` (0 = the endpoint's
// port) and expects one of the endpoint's `expectedCodes` ("200", "200,202", "200-204"; default
// 200); tcp only connects; none or absent disables active probing. `probeRetries` consecutive
// failures (default 2) mark the endpoint down, one success brings it back. Every
// `--probe-interval-ms` (default 5000); timeout `probeTimeout` seconds, else
// `--probe-timeout-ms` (default 2000). An endpoint probed by several rules uses the first rule's
// settings. Over TLS when the rule has security 2 (its mtls_backend context: the probe verifies
// and presents what requests do) or probetype https (no verification: a liveness check).
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/rule.h"
#include "endpoints/endpoint.h"
#include "http/asio.h"
#include "http/tls.h"
#include "proxy/backend_protocol.h"

namespace kvgate::proxy {

struct ProbeSpec {
  std::shared_ptr<endpoints::EndpointState> ep;
  bool http = true;
  uint16_t port = 0;
  std::string method = "GET";
  std::string path = "/health";
  std::vector<std::pair<int, int>> expected{{200, 200}};
  std::chrono::milliseconds timeout{2000};
  int retries = 2;
  std::shared_ptr<http::TlsFiles> tls;  // null: plain
  std::string tls_name;                 // the endpoint's domainName, else its IP
  // The rule's backend_protocol: http2 probes over HTTP/2 (h2c, or h2 by ALPN); both over what
  // the engine speaks (ALPN's choice; h2c first, HTTP/1.1 when it answers that in cleartext). A
  // probeport other than the endpoint's port is probed in HTTP/1.1 whatever the rule says.
  BackendProtocol protocol = BackendProtocol::kHttp1;
};

// Probe specs for every endpoint of `rules` that asks for active probing.
// `tls_of`: a rule's TLS to its endpoints (null: plain).
std::vector<ProbeSpec> probeSpecs(
    const std::vector<config::RuleSpec>& rules,
    const std::vector<std::shared_ptr<endpoints::EndpointState>>& eps,
    std::chrono::milliseconds default_timeout,
    const std::function<std::shared_ptr<http::TlsFiles>(const config::RuleSpec&)>& tls_of = {});

class Prober {
 public:
  Prober(asio::io_context& io, std::chrono::milliseconds interval) : io_(io), interval_(interval) {}
  ~Prober() { stop(); }
  // Replaces the probe set (control thread); endpoints no longer probed count as up.
  void update(std::vector<ProbeSpec> specs);
  void stop();

 private:
  struct Task {
    ProbeSpec spec;
    std::atomic<bool> stopped{false};
    // backend_protocol both: the engine answered h2c's preface in HTTP/1.1; probed in HTTP/1.1
    // until then (then h2c is tried again), as the data plane's connections are (a rule change
    // makes the tasks afresh: h2c is tried again then too).
    std::chrono::steady_clock::time_point http1_until{};
  };
  static asio::awaitable<void> run(std::shared_ptr<Task> t, std::chrono::milliseconds interval);
  // true up, false down, nullopt: no verdict (the gateway had no descriptor or memory for the socket).
  static asio::awaitable<std::optional<bool>> probeOnce(
      const ProbeSpec& s, std::chrono::steady_clock::time_point& http1_until);
  asio::io_context& io_;
  std::chrono::milliseconds interval_;
  std::vector<std::shared_ptr<Task>> tasks_;
};

}  // namespace kvgate::proxy
