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
//
// HTTP/2 to the engines (rules' backend_protocol http2, h2/upstream_session.h): the sessions of
// each endpoint, shared by this worker's requests (a stream each) and kept while they live; a
// request takes the first session with room for a stream, matched by TLS context and name as
// above, else its leg connects a new one (addH2). sweep() closes sessions with no stream for
// `idle_timeout` (GOAWAY first) or whose socket took no byte for as long, and forgets closed
// ones; drop() and clear() (a drain) retire them gracefully: GOAWAY, the streams running finish.
//
// `backend_protocol: both` (BackendProtocol::kBoth): which protocol each endpoint spoke is learned
// per worker. Over TLS, ALPN offers h2 and http/1.1 and the engine's choice is used; in
// cleartext, h2c by prior knowledge is tried first. An engine that chose http/1.1, or answered
// h2c's preface in HTTP/1.1, is spoken to in HTTP/1.1 alone (no h2 offered) for kRelearnAfter,
// then HTTP/2 is tried again (an engine restarted with HTTP/2 is found). drop() forgets it with
// the endpoint.
#pragma once
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "endpoints/endpoint.h"
#include "http/asio.h"
#include "http/fd_tls.h"
#include "proxy/backend_protocol.h"
#include "proxy/rule_stats.h"

namespace kvgate::proxy {
namespace h2 {
class UpstreamSession;
}

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
  // clear(), and every HTTP/2 session closed now, streams and all (the worker's end: nothing of
  // the pool outlives the io_context).
  void closeAll();
  size_t idleCount() const;
  // HTTP/2: a session to `id` with room for a stream (null: none); a new session on `conn`
  // (connected, TLS with ALPN h2 done), started and kept. Either way the caller holds a claim on
  // the session (UpstreamSession::claim) until it opens its stream or gives the claim back.
  std::shared_ptr<h2::UpstreamSession> takeH2(endpoints::EndpointId id,
                                              const asio::ssl::context* tls,
                                              std::string_view tls_name);
  std::shared_ptr<h2::UpstreamSession> addH2(endpoints::EndpointId id, UpstreamConn conn,
                                             asio::io_context& io);
  // HTTP/2 connects in progress: a leg that finds one to its endpoint waits for it (its timer,
  // cancelled when that connect ends, either way) instead of opening a connection of its own, so
  // a burst shares one connection from the start.
  bool h2Connecting(endpoints::EndpointId id) const { return h2_connecting_.count(id) != 0; }
  void beginH2Connect(endpoints::EndpointId id) { h2_connecting_[id]; }
  void endH2Connect(endpoints::EndpointId id);
  void waitH2(endpoints::EndpointId id, asio::steady_timer* t) { h2_connecting_[id].push_back(t); }
  void unwaitH2(endpoints::EndpointId id, asio::steady_timer* t);
  // backend_protocol both: whether a new connection to `id` should try HTTP/2 first (false for
  // kRelearnAfter after the engine answered h2c's preface in HTTP/1.1); what it spoke.
  static constexpr std::chrono::minutes kRelearnAfter{10};
  bool triesH2(endpoints::EndpointId id, std::chrono::steady_clock::time_point now) const {
    auto it = http1_until_.find(id);
    return it == http1_until_.end() || now >= it->second;
  }
  void learnHttp1(endpoints::EndpointId id, std::chrono::steady_clock::time_point now) {
    http1_until_[id] = now + kRelearnAfter;
  }
  void learnHttp2(endpoints::EndpointId id) { http1_until_.erase(id); }
  // kvgate_upstream_protocol_learned_total: 0 h2 by ALPN, 1 http/1.1 by ALPN, 2 h2c, 3 h2c
  // answered in HTTP/1.1.
  void countLearned(size_t how) {
    stats_.upstream_protocol_learned[how].fetch_add(1, std::memory_order_relaxed);
  }

 private:
  void discard(PooledConn& c);
  size_t max_idle_;
  std::chrono::milliseconds idle_timeout_;
  DataPlaneStats& stats_;
  std::unordered_map<endpoints::EndpointId, std::vector<PooledConn>> idle_;
  std::unordered_map<endpoints::EndpointId, std::vector<std::shared_ptr<h2::UpstreamSession>>> h2_;
  std::unordered_map<endpoints::EndpointId, std::vector<asio::steady_timer*>> h2_connecting_;
  std::vector<std::shared_ptr<h2::UpstreamSession>> h2_closing_;  // GOAWAY sent, streams running
  std::unordered_map<endpoints::EndpointId, std::chrono::steady_clock::time_point> http1_until_;
  void retireH2(std::vector<std::shared_ptr<h2::UpstreamSession>>& v);
};

}  // namespace kvgate::proxy
