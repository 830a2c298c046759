// Per-worker keep-alive pool of upstream connections (one pool per worker thread, no locks),
// keyed by EndpointId.
//
// Reuse: every pooled connection is checked with a non-blocking MSG_PEEK first (EOF or stray
// bytes mean "discard": bytes an upstream sent after its response must never reach the next
// client). A request that still fails on
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

#include "endpoints/endpoint.h"
#include "http/asio.h"
#include "proxy/rule_stats.h"

namespace kvgate::proxy {

struct PooledConn {
  tcp::socket sock;
  std::chrono::steady_clock::time_point idle_since;
};

class UpstreamPool {
 public:
  UpstreamPool(size_t max_idle_per_endpoint, std::chrono::milliseconds idle_timeout,
               DataPlaneStats& stats)
      : max_idle_(max_idle_per_endpoint), idle_timeout_(idle_timeout), stats_(stats) {}
  ~UpstreamPool();
  // A live idle connection to `id`, if any.
  bool take(endpoints::EndpointId id, tcp::socket& out);
  void put(endpoints::EndpointId id, tcp::socket sock);
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
