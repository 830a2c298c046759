#include "bench/faults/delay_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

namespace kvgate::bench {

namespace {

int64_t monoNs() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

bool sockaddrOf(const net::HostPort& hp, sockaddr_storage& ss, socklen_t& len) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string host = hp.host;
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (::getaddrinfo(host.c_str(), std::to_string(hp.port).c_str(), &hints, &res) != 0 || !res)
    return false;
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return true;
}

struct Chunk {
  int64_t due;
  std::string bytes;
  size_t off = 0;
};

// One direction of a pair: read from `from`, written to `to` once due.
struct Dir {
  int from = -1, to = -1;
  std::deque<Chunk> q;
  size_t queued = 0;
  bool eof = false;       // `from` reached end of stream
  bool shut = false;      // `to` was shut down for writing (after eof and an empty queue)
  bool want_out = false;  // `to` would block: waiting for EPOLLOUT
};

struct Pair {
  uint64_t id = 0;
  int fd[2];                      // [0] the client, [1] the upstream
  Dir dir[2];                     // [0] client -> upstream, [1] upstream -> client
  bool gone[2] = {false, false};  // that side hung up or was reset (out of the epoll set)
};

}  // namespace

DelayRelay::DelayRelay(net::HostPort listen, net::HostPort upstream, int64_t delay_ns)
    : listen_(std::move(listen)), upstream_(std::move(upstream)), delay_ns_(delay_ns) {}

DelayRelay::~DelayRelay() { stop(); }

Result<uint16_t> DelayRelay::start() {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (!sockaddrOf(listen_, ss, len)) return fail(2, "listen", "--listen: not an IP:PORT");
  sockaddr_storage us{};
  socklen_t ulen = 0;
  if (!sockaddrOf(upstream_, us, ulen)) return fail(2, "upstream", "--upstream: not an IP:PORT");
  listen_fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::listen(listen_fd_, 1024) != 0)
    return fail(2, "listen", std::string("relay listen: ") + std::strerror(errno));
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  const uint16_t port =
      ntohs(ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                    : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { run(); });
  return port;
}

void DelayRelay::stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  for (int* fd : {&listen_fd_, &epoll_fd_, &timer_fd_, &stop_fd_})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
}

void DelayRelay::run() {
  sockaddr_storage us{};
  socklen_t ulen = 0;
  sockaddrOf(upstream_, us, ulen);
  // epoll data: kListen, kTimer, kStop, or a pair's id << 1 | side (ids, not fds: an fd closed
  // earlier in a batch of events and reused by an accept must not receive the old pair's events).
  constexpr uint64_t kListen = 0, kTimer = 1, kStop = 2;
  std::unordered_map<uint64_t, std::shared_ptr<Pair>> pairs;
  uint64_t next_id = 2;
  bool listen_paused = false;
  int64_t paused_until = 0;  // (accept failed: listening resumes then, or when a pair closes)
  std::vector<char> buf(64 * 1024);
  auto ctl = [&](int op, int fd, uint32_t events, uint64_t data) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = data;
    ::epoll_ctl(epoll_fd_, op, fd, &ev);
  };
  ctl(EPOLL_CTL_ADD, listen_fd_, EPOLLIN, kListen);
  ctl(EPOLL_CTL_ADD, timer_fd_, EPOLLIN, kTimer);
  ctl(EPOLL_CTL_ADD, stop_fd_, EPOLLIN, kStop);

  auto interest = [&](Pair& p, int side) {  // what to wait for on p.fd[side]
    if (p.gone[side]) return;
    Dir& in = p.dir[side];       // reads from this fd
    Dir& out = p.dir[1 - side];  // writes to this fd
    uint32_t ev = 0;
    if (!in.eof && in.queued < kMaxQueuedBytes) ev |= EPOLLIN;
    if (out.want_out) ev |= EPOLLOUT;
    ctl(EPOLL_CTL_MOD, p.fd[side], ev, p.id << 1 | uint64_t(side));
  };
  auto pauseListen = [&](int64_t now) {  // (no spin on a listen socket that stays readable)
    ctl(EPOLL_CTL_MOD, listen_fd_, 0, kListen);
    listen_paused = true;
    paused_until = now + 100'000'000;
  };
  // That side hung up, was reset or failed a write: nothing more is written to it, its fd
  // leaves the set (epoll reports HUP whatever the interest); what it sent still reaches the
  // other side, then the pair closes.
  auto markGone = [&](Pair& p, int side) {
    if (p.gone[side]) return;
    p.dir[side].eof = true;
    Dir& back = p.dir[1 - side];
    back.q.clear();
    back.queued = 0;
    back.want_out = false;
    back.eof = true;
    back.shut = true;
    p.gone[side] = true;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p.fd[side], nullptr);
  };
  auto closePair = [&](uint64_t id) {
    auto it = pairs.find(id);
    if (it == pairs.end()) return;
    for (int fd : it->second->fd) ::close(fd);
    pairs.erase(it);
    if (listen_paused) {  // (a descriptor is free again)
      ctl(EPOLL_CTL_MOD, listen_fd_, EPOLLIN, kListen);
      listen_paused = false;
    }
  };
  // Writes what is due in one direction (a failed write marks the receiving side gone).
  auto flush = [&](Pair& p, int d, int64_t now) {
    Dir& dir = p.dir[d];
    while (!dir.q.empty() && dir.q.front().due <= now) {
      Chunk& c = dir.q.front();
      const ssize_t n =
          ::send(dir.to, c.bytes.data() + c.off, c.bytes.size() - c.off, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        dir.want_out = true;
        return;
      }
      if (n < 0) {  // the receiving side is gone: the other direction still flushes
        markGone(p, 1 - d);
        return;
      }
      c.off += size_t(n);
      dir.queued -= size_t(n);
      if (c.off == c.bytes.size()) dir.q.pop_front();
    }
    dir.want_out = false;
    if (dir.eof && dir.q.empty() && !dir.shut) {
      ::shutdown(dir.to, SHUT_WR);
      dir.shut = true;
    }
  };

  for (;;) {
    const int64_t now = monoNs();
    int64_t next = INT64_MAX;
    if (listen_paused && now >= paused_until) {
      ctl(EPOLL_CTL_MOD, listen_fd_, EPOLLIN, kListen);
      listen_paused = false;
    }
    if (listen_paused) next = paused_until;
    std::vector<uint64_t> done;
    for (auto& [id, p] : pairs) {
      for (int d = 0; d < 2; ++d) flush(*p, d, now);
      if (p->dir[0].shut && p->dir[1].shut) {
        done.push_back(id);
        continue;
      }
      for (int d = 0; d < 2; ++d)
        if (!p->dir[d].q.empty() && !p->dir[d].want_out)
          next = std::min(next, p->dir[d].q.front().due);
      interest(*p, 0);
      interest(*p, 1);
    }
    for (uint64_t id : done) closePair(id);
    itimerspec its{};
    if (next != INT64_MAX) {
      its.it_value.tv_sec = next / 1'000'000'000;
      its.it_value.tv_nsec = next % 1'000'000'000;
      if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
    }
    ::timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &its, nullptr);

    epoll_event evs[64];
    const int n = ::epoll_wait(epoll_fd_, evs, 64, -1);
    if (n < 0 && errno != EINTR) {
      while (!pairs.empty()) closePair(pairs.begin()->first);
      return;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = evs[i].data.u64;
      if (tag == kStop) {
        while (!pairs.empty()) closePair(pairs.begin()->first);
        return;
      }
      if (tag == kTimer) {
        uint64_t x;
        [[maybe_unused]] auto r = ::read(timer_fd_, &x, sizeof x);
        continue;
      }
      if (tag == kListen) {
        for (;;) {
          const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (c < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
              pauseListen(monoNs());  // (out of descriptors or memory)
            break;
          }
          if (pairs.size() >= kMaxConns) {
            ::close(c);
            continue;
          }
          const int u = ::socket(us.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
          if (u < 0) {  // (out of descriptors: the client is closed, accepting pauses)
            ::close(c);
            pauseListen(monoNs());
            break;
          }
          if (::connect(u, reinterpret_cast<sockaddr*>(&us), ulen) != 0 && errno != EINPROGRESS) {
            ::close(c);
            ::close(u);
            continue;
          }
          const int one = 1;
          ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          ::setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          auto p = std::make_shared<Pair>();
          p->id = next_id++;
          p->fd[0] = c;
          p->fd[1] = u;
          p->dir[0].from = c;
          p->dir[0].to = u;
          p->dir[1].from = u;
          p->dir[1].to = c;
          // (the upstream's connect completes in the background: the first write waits for it
          // through EAGAIN/EPOLLOUT like any other)
          for (int side = 0; side < 2; ++side)
            ctl(EPOLL_CTL_ADD, p->fd[side], EPOLLIN, p->id << 1 | uint64_t(side));
          pairs[p->id] = p;
        }
        continue;
      }
      auto it = pairs.find(tag >> 1);
      if (it == pairs.end()) continue;  // (a pair closed earlier in this batch)
      Pair& p = *it->second;
      const int side = int(tag & 1);
      const int fd = p.fd[side];
      Dir& in = p.dir[side];
      // The peer is gone (HUP) or reset (ERR): everything it still sent is read whatever the
      // bound (the kernel's buffer bounds it) and still reaches the other side, delayed; nothing
      // more is written to it, and its fd leaves the set (epoll reports HUP whatever the
      // interest). The pair closes once the other direction has flushed.
      const bool gone = (evs[i].events & (EPOLLHUP | EPOLLERR)) != 0;
      if ((evs[i].events & EPOLLIN) || gone) {
        const int64_t t = monoNs();
        while (!in.eof && (gone || in.queued < kMaxQueuedBytes)) {
          const ssize_t r = ::recv(fd, buf.data(), buf.size(), 0);
          if (r > 0) {
            in.q.push_back(Chunk{t + delay_ns_, std::string(buf.data(), size_t(r))});
            in.queued += size_t(r);
            continue;
          }
          if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) in.eof = true;
          break;
        }
      }
      if (evs[i].events & EPOLLOUT) p.dir[1 - side].want_out = false;  // (flushed next pass)
      if (gone) markGone(p, side);
    }
  }
}

namespace {
volatile sig_atomic_t g_stop = 0;
void onSignal(int) { g_stop = 1; }
}  // namespace

int relayMain(int argc, char** argv) {
  std::optional<net::HostPort> listen, upstream;
  uint64_t delay_us = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string v = i + 1 < argc ? argv[++i] : "";
    bool ok = true;
    if (a == "--listen") {
      listen = net::parseHostPort(v);
      ok = listen.has_value();
    } else if (a == "--upstream") {
      upstream = net::parseHostPort(v);
      ok = upstream.has_value();
    } else if (a == "--delay-us") {
      ok = net::parseUint(v, 10'000'000, delay_us);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "kvgate bench relay: bad or unknown flag %s %s\n", a.c_str(), v.c_str());
      listen.reset();
      break;
    }
  }
  if (!listen || !upstream) {
    std::fprintf(stderr,
                 "usage: kvgate bench relay --listen IP:PORT --upstream IP:PORT [--delay-us N]\n"
                 "Relays TCP, adding N microseconds each way (a round trip gains 2N).\n");
    return 2;
  }
  DelayRelay relay(*listen, *upstream, int64_t(delay_us) * 1000);
  auto port = relay.start();
  if (!port) {
    std::fprintf(stderr, "kvgate bench relay: %s\n", port.error().what.c_str());
    return 2;
  }
  std::signal(SIGINT, onSignal);
  std::signal(SIGTERM, onSignal);
  std::printf("relay listening on port %u, +%llu us each way\n", unsigned(*port),
              static_cast<unsigned long long>(delay_us));
  std::fflush(stdout);
  while (!g_stop) ::pause();
  relay.stop();
  return 0;
}

}  // namespace kvgate::bench
