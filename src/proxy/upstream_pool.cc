#include "proxy/upstream_pool.h"

namespace kvgate::proxy {
UpstreamPool::~UpstreamPool() { clear(); }

void UpstreamPool::discard(PooledConn& c) {
  error_code ec;
  c.sock.close(ec);
  stats_.idle_upstream.fetch_sub(1, std::memory_order_relaxed);
  stats_.reaped_upstream.fetch_add(1, std::memory_order_relaxed);
}

bool UpstreamPool::take(endpoints::EndpointId id, tcp::socket& out) {
  auto it = idle_.find(id);
  if (it == idle_.end()) return false;
  auto now = std::chrono::steady_clock::now();
  auto& v = it->second;
  while (!v.empty()) {
    PooledConn c = std::move(v.back());
    v.pop_back();
    error_code ec;
    c.sock.cancel(ec);  // its idle watch ends (the handler sees operation_aborted)
    // A peer close that raced with this take is caught by the caller's resend-on-a-fresh-
    // connection rule (nothing reached the engine).
    if (now - c.idle_since < idle_timeout_ && c.sock.is_open()) {
      out = std::move(c.sock);
      stats_.idle_upstream.fetch_sub(1, std::memory_order_relaxed);
      return true;
    }
    discard(c);
  }
  return false;
}

void UpstreamPool::put(endpoints::EndpointId id, tcp::socket sock) {
  auto& v = idle_[id];
  if (v.size() >= max_idle_) {
    error_code ec;
    sock.close(ec);
    return;
  }
  const uint64_t tag = ++next_tag_;
  v.push_back(PooledConn{std::move(sock), std::chrono::steady_clock::now(), tag});
  stats_.idle_upstream.fetch_add(1, std::memory_order_relaxed);
  v.back().sock.async_wait(tcp::socket::wait_read, [this, id, tag](const error_code& ec) {
    if (ec != asio::error::operation_aborted) onIdleReadable(id, tag);
  });
}

// An idle connection became readable: the upstream closed it or sent bytes nobody asked for.
void UpstreamPool::onIdleReadable(endpoints::EndpointId id, uint64_t tag) {
  auto it = idle_.find(id);
  if (it == idle_.end()) return;
  auto& v = it->second;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].tag != tag) continue;
    discard(v[i]);
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
    if (v.empty()) idle_.erase(it);
    return;
  }
}

void UpstreamPool::sweep(std::chrono::steady_clock::time_point now) {
  for (auto it = idle_.begin(); it != idle_.end();) {
    auto& v = it->second;
    size_t keep = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (now - v[i].idle_since < idle_timeout_ && v[i].sock.is_open()) {
        if (keep != i) v[keep] = std::move(v[i]);
        ++keep;
      } else {
        discard(v[i]);
      }
    }
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(keep), v.end());
    it = v.empty() ? idle_.erase(it) : std::next(it);
  }
}

void UpstreamPool::drop(const std::vector<endpoints::EndpointId>& ids) {
  for (auto id : ids) {
    auto it = idle_.find(id);
    if (it == idle_.end()) continue;
    for (auto& c : it->second) discard(c);
    idle_.erase(it);
  }
}

void UpstreamPool::clear() {
  for (auto& [id, v] : idle_)
    for (auto& c : v) discard(c);
  idle_.clear();
}

size_t UpstreamPool::idleCount() const {
  size_t n = 0;
  for (auto& [id, v] : idle_) n += v.size();
  return n;
}

}  // namespace kvgate::proxy
