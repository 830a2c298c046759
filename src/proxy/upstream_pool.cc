#include "proxy/upstream_pool.h"

#include <sys/socket.h>

#include <cerrno>

#include "common/log.h"

namespace kvgate::proxy {
namespace {
// True when the peer has not closed the idle connection and sent nothing unexpected.
bool stillUsable(tcp::socket& s) {
  char c;
  ssize_t n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  return false;  // 0: EOF (closed while idle); >0: unsolicited bytes; <0: error
}
}  // namespace

constexpr std::chrono::milliseconds kPeekAfter{50};

bool UpstreamPool::take(const std::string& key, tcp::socket& out) {
  auto it = idle_.find(key);
  if (it == idle_.end()) return false;
  auto now = std::chrono::steady_clock::now();
  auto& v = it->second;
  while (!v.empty()) {
    PooledConn c = std::move(v.back());
    v.pop_back();
    // A connection idle for under kPeekAfter is reused without the MSG_PEEK syscall: a peer
    // close that recent is caught by the caller's resend-on-fresh-connection rule instead.
    auto idle = now - c.idle_since;
    if (idle < idle_timeout_ && (idle < kPeekAfter || stillUsable(c.sock))) {
      out = std::move(c.sock);
      return true;
    }
    log::debug("pool", "discarding idle connection to " + key + " (closed by the peer or too old)");
    error_code ec;
    c.sock.close(ec);
  }
  return false;
}

void UpstreamPool::put(const std::string& key, tcp::socket sock) {
  auto& v = idle_[key];
  if (v.size() >= max_idle_) {
    error_code ec;
    sock.close(ec);
    return;
  }
  v.push_back(PooledConn{std::move(sock), std::chrono::steady_clock::now()});
}

}  // namespace kvgate::proxy
