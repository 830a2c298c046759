// Per-worker keep-alive pool of upstream connections (one pool per worker thread, no locks).
//
// An idle connection the worker closed is detected before reuse with a non-blocking MSG_PEEK
// (EOF or stray bytes mean "discard"); connections idle longer than `idle_timeout` are dropped.
// A request that still fails on a reused connection before any response byte arrives is sent
// again on a fresh connection by the caller (see connection.cc), so pool staleness loses nothing.
#pragma once
#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

#include "http/asio.h"

namespace kvgate::proxy {

struct PooledConn {
  tcp::socket sock;
  std::chrono::steady_clock::time_point idle_since;
};

class UpstreamPool {
 public:
  UpstreamPool(size_t max_idle_per_endpoint, std::chrono::milliseconds idle_timeout)
      : max_idle_(max_idle_per_endpoint), idle_timeout_(idle_timeout) {}
  // A live idle connection to `key`, if any.
  bool take(const std::string& key, tcp::socket& out);
  void put(const std::string& key, tcp::socket sock);

 private:
  size_t max_idle_;
  std::chrono::milliseconds idle_timeout_;
  std::unordered_map<std::string, std::vector<PooledConn>> idle_;
};

}  // namespace kvgate::proxy
