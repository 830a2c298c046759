#include "proxy/upstream_pool.h"

#include "http/readiness.h"
#include "proxy/h2/upstream_session.h"

namespace kvgate::proxy {
namespace {
// True when the peer has not closed the idle connection and sent nothing unexpected (for TLS:
// nothing on the socket, and no record, decrypted or not, left in OpenSSL either). A plain socket
// that a read of ours drained with no epoll edge since has nothing to show (http/readiness.h):
// no MSG_PEEK then, a syscall saved per request. What that leaves unseen is only what arrived
// since this worker last polled (the peek itself misses what arrives after it), as with nginx,
// which watches idle upstream connections for events and checks nothing when it reuses one.
bool stillUsable(UpstreamConn& conn) {
  if (!conn.drained()) return false;
  // (TLS reads do not keep the readiness flag: always a peek)
  return conn.tls ? http::peekFindsNothing(conn.sock) : http::holdsNothing(conn.sock);
}
}  // namespace

UpstreamPool::~UpstreamPool() { closeAll(); }

void UpstreamPool::closeAll() {
  clear();
  for (auto& s : h2_closing_) s->close();
  h2_closing_.clear();
  h2_connecting_.clear();
}

std::shared_ptr<h2::UpstreamSession> UpstreamPool::takeH2(endpoints::EndpointId id,
                                                          const asio::ssl::context* tls,
                                                          std::string_view tls_name) {
  auto it = h2_.find(id);
  if (it == h2_.end()) return nullptr;
  for (const auto& s : it->second)
    if (s->tlsContext() == tls && (!tls || s->tlsName() == tls_name) && s->usable()) {
      s->claim();  // (the taker's stream place, until it opens it or gives up)
      return s;
    }
  return nullptr;
}

void UpstreamPool::endH2Connect(endpoints::EndpointId id) {
  auto it = h2_connecting_.find(id);
  if (it == h2_connecting_.end()) return;
  const std::vector<asio::steady_timer*> waiters = std::move(it->second);
  h2_connecting_.erase(it);
  for (auto* t : waiters) t->cancel();
}

void UpstreamPool::unwaitH2(endpoints::EndpointId id, asio::steady_timer* t) {
  auto it = h2_connecting_.find(id);
  if (it != h2_connecting_.end()) std::erase(it->second, t);
}

std::shared_ptr<h2::UpstreamSession> UpstreamPool::addH2(endpoints::EndpointId id,
                                                         UpstreamConn conn, asio::io_context& io) {
  auto s =
      std::make_shared<h2::UpstreamSession>(io, std::move(conn.sock), std::move(conn.tls),
                                            std::move(conn.ctx), std::move(conn.tls_name), stats_);
  s->start();
  s->claim();
  h2_[id].push_back(s);
  return s;
}

void UpstreamPool::discard(PooledConn& c) {
  c.conn.close();
  stats_.idle_upstream.fetch_sub(1, std::memory_order_relaxed);
  stats_.reaped_upstream.fetch_add(1, std::memory_order_relaxed);
}

bool UpstreamPool::take(endpoints::EndpointId id, const asio::ssl::context* tls,
                        std::string_view tls_name, UpstreamConn& out) {
  auto it = idle_.find(id);
  if (it == idle_.end()) return false;
  auto now = std::chrono::steady_clock::now();
  auto& v = it->second;
  // The newest connection made with this context (plain and TLS ones to one endpoint are rare
  // together: a scan over the few that are not is cheap).
  for (size_t i = v.size(); i-- > 0;) {
    if (v[i].conn.ctx.get() != tls || (tls && v[i].conn.tls_name != tls_name)) continue;
    PooledConn c = std::move(v[i]);
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
    // Every reuse is checked (stillUsable): a peer close is caught here (else by the caller's
    // resend-on-fresh-connection rule), and stray bytes a misbehaving upstream sent after its
    // response (they would be read as the next client's response) discard the connection.
    auto idle = now - c.idle_since;
    if (idle < idle_timeout_ && stillUsable(c.conn)) {
      out = std::move(c.conn);
      stats_.idle_upstream.fetch_sub(1, std::memory_order_relaxed);
      return true;
    }
    discard(c);
  }
  if (v.empty()) idle_.erase(it);
  return false;
}

void UpstreamPool::put(endpoints::EndpointId id, UpstreamConn conn) {
  auto& v = idle_[id];
  if (v.size() >= max_idle_) {
    conn.close();
    return;
  }
  v.push_back(PooledConn{std::move(conn), std::chrono::steady_clock::now()});
  stats_.idle_upstream.fetch_add(1, std::memory_order_relaxed);
}

void UpstreamPool::sweep(std::chrono::steady_clock::time_point now) {
  // (what an endpoint spoke, once it no longer steers anything: also an entry a connect made
  // after its endpoint was dropped)
  std::erase_if(http1_until_, [now](const auto& e) { return now >= e.second; });
  for (auto it = idle_.begin(); it != idle_.end();) {
    auto& v = it->second;
    size_t keep = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (now - v[i].idle_since < idle_timeout_ && stillUsable(v[i].conn)) {
        if (keep != i) v[keep] = std::move(v[i]);
        ++keep;
      } else {
        discard(v[i]);
      }
    }
    v.erase(v.begin() + static_cast<std::ptrdiff_t>(keep), v.end());
    it = v.empty() ? idle_.erase(it) : std::next(it);
  }
  // HTTP/2: a session whose socket takes no byte for the idle timeout is closed with its streams;
  // one with no stream and no claim closes gracefully (GOAWAY, then its writer closes) once idle
  // for the timeout, or after a second when it takes no new stream anyway (the engine's GOAWAY,
  // a connect whose leg gave up before the SETTINGS). Closed ones are forgotten.
  auto sweepH2 = [&](std::shared_ptr<h2::UpstreamSession>& s) {
    if (s->closed()) return true;
    if (s->writeStalledSince(now - idle_timeout_)) {
      s->close();
      return true;
    }
    if (s->streams() == 0 && s->claims() == 0 &&
        (now - s->idleSince() >= idle_timeout_ ||
         (!s->usable() && now - s->idleSince() >= std::chrono::seconds(1))))
      s->close(/*graceful=*/true);
    return false;
  };
  for (auto it = h2_.begin(); it != h2_.end();) {
    std::erase_if(it->second, sweepH2);
    it = it->second.empty() ? h2_.erase(it) : std::next(it);
  }
  std::erase_if(h2_closing_, sweepH2);
}

// HTTP/2 sessions leave the pool gracefully: GOAWAY, the streams running finish; they stay in
// h2_closing_ (swept: closed when their socket stalls) until their writer closes them.
void UpstreamPool::retireH2(std::vector<std::shared_ptr<h2::UpstreamSession>>& v) {
  for (auto& s : v) {
    s->close(/*graceful=*/true);
    if (!s->closed()) h2_closing_.push_back(std::move(s));
  }
  v.clear();
}

void UpstreamPool::drop(const std::vector<endpoints::EndpointId>& ids) {
  for (auto id : ids) http1_until_.erase(id);
  for (auto id : ids) {
    auto it = idle_.find(id);
    if (it == idle_.end()) continue;
    for (auto& c : it->second) discard(c);
    idle_.erase(it);
  }
  for (auto id : ids) {
    auto it = h2_.find(id);
    if (it == h2_.end()) continue;
    retireH2(it->second);  // (requests running finish)
    h2_.erase(it);
  }
}

void UpstreamPool::clear() {
  for (auto& [id, v] : idle_)
    for (auto& c : v) discard(c);
  idle_.clear();
  // (a drain: the streams running finish; the session's end follows its last one)
  for (auto& [id, v] : h2_) retireH2(v);
  h2_.clear();
}

size_t UpstreamPool::idleCount() const {
  size_t n = 0;
  for (auto& [id, v] : idle_) n += v.size();
  return n;
}

}  // namespace kvgate::proxy
