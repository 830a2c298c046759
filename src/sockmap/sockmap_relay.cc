// The sockmap relay's control (sockmap_relay.h says how it is used).
#include "sockmap/sockmap_relay.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "sockmap/sockmap_maps.h"
#include "sockmap/sockmap_relay.skel.h"

namespace kvgate::sockmap {

const char* noticeName(Notice n) {
  switch (n) {
    case Notice::kDone:
      return "done";
    case Notice::kOverrun:
      return "overrun";
    case Notice::kReset:
      return "reset";
    case Notice::kGone:
      return "client_gone";
    case Notice::kNone:
      break;
  }
  return "none";
}

Registration& Registration::operator=(Registration&& o) noexcept {
  if (this != &o) {
    reset();
    relay_ = o.relay_;
    cookie_ = std::exchange(o.cookie_, 0);
  }
  return *this;
}

void Registration::reset() {
  if (cookie_ && relay_) relay_->forgetTarget(cookie_);
  cookie_ = 0;
}

namespace {
std::once_flag g_once;
std::atomic<Relay*> g_relay{nullptr};
std::atomic<bool> g_tried{false};
std::string g_error;  // (written before g_tried)
std::atomic<uint64_t> g_budget{256ull << 20};
}  // namespace

Arming::~Arming() {
  if (cookie_ && relay_) relay_->disarm(cookie_, bytes_);
}

uint64_t Arming::remaining() const {
  relay_state st{};
  if (!relay_ || bpf_map_lookup_elem(relay_->relays_fd_, &cookie_, &st) != 0) return UINT64_MAX;
  return st.remaining;
}

uint64_t Arming::detach() {
  if (!relay_ || !cookie_) return 0;
  bpf_map_delete_elem(relay_->sources_fd_, &cookie_);  // no byte is passed to the program now
  uint64_t n = 0;
  bpf_map_lookup_elem(relay_->counts_fd_, &cookie_, &n);
  return n;
}

uint64_t Arming::relayed() const {
  relay_state st{};
  if (!relay_ || bpf_map_lookup_elem(relay_->relays_fd_, &cookie_, &st) != 0) return 0;
  return st.relayed;
}

void Relay::setBudget(uint64_t bytes) { g_budget.store(bytes, std::memory_order_relaxed); }
Relay* Relay::get() { return g_relay.load(std::memory_order_acquire); }
bool Relay::tried() { return g_tried.load(std::memory_order_acquire); }

void Relay::warm() {
  std::call_once(g_once, [] {
    auto* r = new Relay();  // (the process's: never freed, its thread runs until exit)
    std::string err;
    if (r->load(err)) {
      g_relay.store(r, std::memory_order_release);
      log::info("sockmap",
                "sockmap relay loaded: response bodies of sockMapMode rules are "
                "spliced in the kernel");
    } else {
      g_error = err;
      log::warn("sockmap", "sockmap relay unavailable (" + err +
                               "): sockMapMode rules are relayed in userspace");
      delete r;
    }
    g_tried.store(true, std::memory_order_release);
  });
}

std::string Relay::loadError() { return tried() ? g_error : std::string(); }

bool Relay::load(std::string& err) {
  // The relay relies on the stream parser's offset and length being honoured by the redirect
  // (bytes the gateway read before the arming are never sent again): tested on 6.18; kernels
  // before 6.1 are refused (their rules are relayed in userspace).
  utsname u{};
  int major = 0, minor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2 ||
      major * 1000 + minor < 6001) {
    err = std::string("kernel ") + u.release + " is older than 6.1";
    return false;
  }
  skel_ = sockmap_relay__open();
  if (!skel_) {
    err = std::string("open: ") + std::strerror(errno);
    return false;
  }
  if (sockmap_relay__load(skel_) != 0) {
    err = std::string("load: ") + std::strerror(errno);
    return false;
  }
  sources_fd_ = bpf_map__fd(skel_->maps.sources);
  targets_fd_ = bpf_map__fd(skel_->maps.targets);
  relays_fd_ = bpf_map__fd(skel_->maps.relays);
  counts_fd_ = bpf_map__fd(skel_->maps.counts);
  if (bpf_prog_attach(bpf_program__fd(skel_->progs.relay_parser), sources_fd_,
                      BPF_SK_SKB_STREAM_PARSER, 0) != 0 ||
      bpf_prog_attach(bpf_program__fd(skel_->progs.relay_verdict), sources_fd_,
                      BPF_SK_SKB_STREAM_VERDICT, 0) != 0) {
    err = std::string("attach: ") + std::strerror(errno);
    return false;
  }
  rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.notices), &Relay::onNotice, this, nullptr);
  if (!rb_) {
    err = std::string("ring buffer: ") + std::strerror(errno);
    return false;
  }
  notices_ = std::thread([this] { noticeLoop(); });
  return true;
}

Relay::~Relay() {
  stop_ = true;
  if (notices_.joinable()) notices_.join();
  if (rb_) ring_buffer__free(rb_);
  if (skel_) sockmap_relay__destroy(skel_);
}

void Relay::noticeLoop() {
  while (!stop_.load(std::memory_order_relaxed)) ring_buffer__poll(rb_, 200);
}

int Relay::onNotice(void* ctx, void* data, size_t size) {
  auto* self = static_cast<Relay*>(ctx);
  if (size < sizeof(relay_notice)) return 0;
  relay_notice n;
  std::memcpy(&n, data, sizeof n);
  const auto kind = static_cast<Notice>(n.kind);
  switch (kind) {
    case Notice::kDone:
      self->relays_done.fetch_add(1, std::memory_order_relaxed);
      self->bytes_relayed.fetch_add(n.bytes, std::memory_order_relaxed);
      break;
    case Notice::kGone:
      self->relays_gone.fetch_add(1, std::memory_order_relaxed);
      self->bytes_relayed.fetch_add(n.bytes, std::memory_order_relaxed);
      break;
    case Notice::kOverrun:
      self->relays_overrun.fetch_add(1, std::memory_order_relaxed);
      self->bytes_relayed.fetch_add(n.bytes, std::memory_order_relaxed);
      break;
    default:
      return 0;
  }
  std::lock_guard lock(self->mu_);
  auto it = self->callbacks_.find(n.cookie);
  if (it == self->callbacks_.end()) return 0;
  Callback cb = std::move(it->second);
  self->callbacks_.erase(it);
  cb(kind, n.bytes);  // (under the lock: cancel() returns only once no callback runs)
  return 0;
}

Registration Relay::addTarget(int fd) {
  uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  const uint64_t value = static_cast<uint64_t>(fd);
  if (getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0 || cookie == 0 ||
      bpf_map_update_elem(targets_fd_, &cookie, &value, BPF_ANY) != 0) {
    register_failed.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  sockets_targets.fetch_add(1, std::memory_order_relaxed);
  return Registration(this, cookie);
}

void Relay::forgetTarget(uint64_t cookie) {
  // (the kernel drops a closed socket by itself: then ENOENT)
  bpf_map_delete_elem(targets_fd_, &cookie);
  sockets_targets.fetch_sub(1, std::memory_order_relaxed);
}

Arming Relay::arm(int source_fd, uint64_t target, uint64_t remaining, Callback cb) {
  uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  if (remaining == 0 || getsockopt(source_fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) != 0 ||
      cookie == 0)
    return {};
  // The budget of bodies armed at once (the kernel's queue for a slow client is unbounded).
  const uint64_t budget = g_budget.load(std::memory_order_relaxed);
  uint64_t held = armed_bytes.load(std::memory_order_relaxed);
  do {
    if (held + remaining > budget) {
      over_budget.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
  } while (!armed_bytes.compare_exchange_weak(held, held + remaining, std::memory_order_relaxed));
  Arming a(this, cookie, remaining);  // (from here on, its destructor undoes what follows)
  relay_state st{};
  st.peer = target;
  st.remaining = remaining;
  // A message must fit the receive window strparser waits on: a quarter of SO_RCVBUF (which
  // reports twice the buffer) and at most SOCKMAP_MSG_MAX.
  int rcvbuf = 0;
  socklen_t rl = sizeof rcvbuf;
  if (getsockopt(source_fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &rl) != 0) rcvbuf = 0;
  st.msg_max = std::clamp<uint64_t>(static_cast<uint64_t>(rcvbuf) / 4, 4096, SOCKMAP_MSG_MAX);
  const uint64_t zero = 0;
  {
    std::lock_guard lock(mu_);
    callbacks_[cookie] = std::move(cb);
  }
  const uint64_t value = static_cast<uint64_t>(source_fd);
  if (bpf_map_update_elem(relays_fd_, &cookie, &st, BPF_ANY) != 0 ||
      bpf_map_update_elem(counts_fd_, &cookie, &zero, BPF_ANY) != 0 ||
      bpf_map_update_elem(sources_fd_, &cookie, &value, BPF_ANY) != 0) {
    register_failed.fetch_add(1, std::memory_order_relaxed);
    return {};  // (`a` undoes it; no byte went to the program: the insert is the last step)
  }
  // The bytes already in the receive queue raised their data-ready before the program was there:
  // raise one now (setting SO_RCVLOWAT signals readiness when bytes wait, tcp_set_rcvlowat).
  const int one = 1;
  setsockopt(source_fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
  return a;
}

void Relay::disarm(uint64_t cookie, uint64_t bytes) {
  {
    std::lock_guard lock(mu_);
    callbacks_.erase(cookie);
  }
  bpf_map_delete_elem(sources_fd_, &cookie);  // an ordinary socket again (ENOENT once closed)
  bpf_map_delete_elem(relays_fd_, &cookie);
  bpf_map_delete_elem(counts_fd_, &cookie);
  armed_bytes.fetch_sub(bytes, std::memory_order_relaxed);
}

bool Relay::exactQueuedTotal(int fd, uint64_t& out) {
  // (acked, queued, acked again: equal acks mean no ACK moved bytes between the two readings)
  for (int i = 0; i < 16; ++i) {
    tcp_info a{}, b{};
    socklen_t la = sizeof a, lb = sizeof b;
    int queued = 0;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &a, &la) != 0 || ioctl(fd, SIOCOUTQ, &queued) != 0 ||
        queued < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &b, &lb) != 0)
      return false;
    if (a.tcpi_bytes_acked == b.tcpi_bytes_acked) {
      out = a.tcpi_bytes_acked + static_cast<uint64_t>(queued);
      return true;
    }
  }
  return false;  // (acks kept moving: the caller relays this body itself)
}

bool Relay::established(int fd) {
  tcp_info ti{};
  socklen_t len = sizeof ti;
  return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
         ti.tcpi_state == BPF_TCP_ESTABLISHED;  // (1, as the kernel's TCP_ESTABLISHED)
}

bool Relay::queuedTotal(int fd, uint64_t& out) {
  // (acked first, queued second: bytes moving between the two are missed, never counted twice,
  // so an under-count only waits longer)
  tcp_info ti{};
  socklen_t len = sizeof ti;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return false;
  int queued = 0;
  if (ioctl(fd, SIOCOUTQ, &queued) != 0 || queued < 0) return false;
  out = ti.tcpi_bytes_acked + static_cast<uint64_t>(queued);
  return true;
}

uint64_t Relay::resetAll() {
  std::lock_guard lock(mu_);  // (each callback only posts to its worker)
  const uint64_t n = callbacks_.size();
  for (auto& [cookie, cb] : callbacks_) {
    relays_reset.fetch_add(1, std::memory_order_relaxed);
    cb(Notice::kReset, 0);
  }
  callbacks_.clear();
  return n;
}

}  // namespace kvgate::sockmap
