// Per-worker keep-alive pool of upstream connections (one pool per worker thread, no locks),
// keyed by EndpointId and, for TLS to the engines (security 2), the rule's client TLS context and
// the name the engine's certificate was checked for: a connection is reused only by a request
// wanting the same context and name (never plain for TLS, one rule's client certificate for
// another's, or a certificate checked for one name by a rule expecting another).
//
// Reuse: every pooled connection is checked first (EOF or stray bytes mean "discard": bytes an
// upstream sent after its response must never reach the next client): a non-blocking MSG_PEEK,
// or for plain TCP no syscall when our own read readiness knows no byte or close reached the
// socket since a read of ours drained it (http/readiness.h). A request that still fails on
// a reused connection before any response byte arrives is sent again on a fresh connection by
// the caller (UpstreamLeg's retry_safe), so pool staleness loses nothing.
// Reaping: sweep() (every second, from the worker) closes connections the upstream closed while
// idle (no CLOSE_WAIT sockets left behind) and those idle longer than `idle_timeout`; drop()
// frees the pools of endpoints removed from every rule.
// Knobs: --upstream-idle-ms (idle_timeout, default 30000), max idle per endpoint (256).
#pragma once
#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/asio/ssl.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "endpoints/endpoint.h"
#include "http/asio.h"
#include "http/fd_tls.h"
#include "proxy/rule_stats.h"

namespace kvgate::proxy {

// One upstream connection: plain TCP, or TLS over it (http/fd_tls.h: OpenSSL on the socket's
// descriptor, so a pooled connection's "nothing pending" check is exact). `ctx` keeps the TLS
// context's address from being reused while pooled connections are matched by it (the SSL object
// holds its own reference to the context either way).
struct UpstreamConn {
  explicit UpstreamConn(asio::io_context& io) : sock(io) {}
  tcp::socket sock;
  std::shared_ptr<asio::ssl::context> ctx;
  std::unique_ptr<http::FdTls> tls;
  std::string tls_name;  // the name the peer's certificate was checked for
  bool isOpen() { return sock.is_open(); }
  // No byte of a finished exchange is left anywhere but the kernel (checked with MSG_PEEK).
  bool drained() const { return !tls || !tls->pending(); }
  void close() {
    error_code ec;
    sock.close(ec);
  }
};

struct PooledConn {
  UpstreamConn conn;
  std::chrono::steady_clock::time_point idle_since;
};

class UpstreamPool {
 public:
  UpstreamPool(size_t max_idle_per_endpoint, std::chrono::milliseconds idle_timeout,
               DataPlaneStats& stats)
      : max_idle_(max_idle_per_endpoint), idle_timeout_(idle_timeout), stats_(stats) {}
  ~UpstreamPool();
  // A live idle connection to `id` made with TLS context `tls` (null: plain) for `tls_name`.
  bool take(endpoints::EndpointId id, const asio::ssl::context* tls, std::string_view tls_name,
            UpstreamConn& out);
  void put(endpoints::EndpointId id, UpstreamConn conn);
  // Closes idle connections that the peer closed or that are older than the idle timeout.
  void sweep(std::chrono::steady_clock::time_point now);
  // Closes and forgets every idle connection to these endpoints.
  void drop(const std::vector<endpoints::EndpointId>& ids);
  void clear();
  size_t idleCount() const;

 private:
  void discard(PooledConn& c);
  size_t max_idle_;
  std::chrono::milliseconds idle_timeout_;
  DataPlaneStats& stats_;
  std::unordered_map<endpoints::EndpointId, std::vector<PooledConn>> idle_;
};

}  // namespace kvgate::proxy
