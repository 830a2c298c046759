// Own read readiness under Asio's epoll reactor: see readiness.h for the algorithm and why no
// byte or close can be missed. The accessors below are the only places that reach into Asio's
// private state (Boost 1.74's epoll_reactor).
#include "http/readiness.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <type_traits>

namespace kvgate::http {

#if KVGATE_OWN_READINESS
namespace readiness_detail {
namespace {

// The socket's implementation (descriptor and reactor data) is a protected member of
// basic_socket: a pointer to it may be formed through a derived class.
struct SocketAccess : tcp::socket {
  static auto& impl(tcp::socket& s) { return (s.*(&SocketAccess::impl_)).get_implementation(); }
};

// Private members: their addresses are taken in explicit instantiations (where access is not
// checked) and handed out by friend functions.
template <typename Tag, typename Tag::type M>
struct Expose {
  friend typename Tag::type member(Tag) { return M; }
};
struct TrySpeculative {
  using type = bool (DescriptorState::*)[Reactor::max_ops];
  friend type member(TrySpeculative);
};
template struct Expose<TrySpeculative, &DescriptorState::try_speculative_>;
struct RegisteredEvents {
  using type = uint32_t DescriptorState::*;
  friend type member(RegisteredEvents);
};
template struct Expose<RegisteredEvents, &DescriptorState::registered_events_>;
struct EpollFd {
  using type = int Reactor::*;
  friend type member(EpollFd);
};
template struct Expose<EpollFd, &Reactor::epoll_fd_>;
struct ReactorOf {
  using type = Reactor* DescriptorState::*;
  friend type member(ReactorOf);
};
template struct Expose<ReactorOf, &DescriptorState::reactor_>;
// The events epoll reported for a descriptor are its operation's task result while the reactor
// performs its ops (descriptor_state derives from operation privately: a C-style cast reaches it).
struct TaskResult {
  using type = unsigned int asio::detail::scheduler_operation::*;
  friend type member(TaskResult);
};
template struct Expose<TaskResult, &asio::detail::scheduler_operation::task_result_>;

bool* readFlag(DescriptorState* d) {
  return d ? &((d->*member(TrySpeculative{}))[Reactor::read_op]) : nullptr;
}
bool* readFlag(tcp::socket& s) { return readFlag(SocketAccess::impl(s).reactor_data_); }

bool watchesPeerClose(DescriptorState* d) {
  return d && ((d->*member(RegisteredEvents{})) & EPOLLRDHUP) != 0;
}

void setReadFlag(tcp::socket& s, bool may_be_readable) {
  if (bool* f = readFlag(s)) *f = may_be_readable;
}

}  // namespace

uint32_t harvestedEvents(DescriptorState* d) {
  // NOLINTNEXTLINE(google-readability-casting): the base is private, only a C-style cast reaches it
  auto* op = (asio::detail::scheduler_operation*)d;
  return op->*member(TaskResult{});
}

void clearReadFlag(DescriptorState* d) {
  if (bool* f = readFlag(d)) *f = false;
}

Reactor& reactorOf(tcp::socket& s) {
  // The descriptor's own reactor when it is registered (no lookup, nothing cached that could
  // outlive its io_context); the io_context's service otherwise.
  if (DescriptorState* d = SocketAccess::impl(s).reactor_data_) return *(d->*member(ReactorOf{}));
  return asio::use_service<Reactor>(asio::query(s.get_executor(), asio::execution::context));
}

int fdOf(tcp::socket& s) { return SocketAccess::impl(s).socket_; }

Reactor::per_descriptor_data& descriptorOf(tcp::socket& s) {
  return SocketAccess::impl(s).reactor_data_;
}

}  // namespace readiness_detail

bool mayBeReadable(tcp::socket& s) {
  const bool* f = readiness_detail::readFlag(s);
  return !f || *f;
}

void watchPeerClose(tcp::socket& s) {
  using namespace readiness_detail;
  DescriptorState* d = SocketAccess::impl(s).reactor_data_;
  if (!d || watchesPeerClose(d)) return;
  uint32_t& registered = d->*member(RegisteredEvents{});
  epoll_event ev{};
  ev.events = registered | EPOLLRDHUP;
  ev.data.ptr = d;
  // Asio keeps `registered` as the mask it re-arms with (EPOLLOUT is added to it the same way),
  // so the flag survives its later epoll_ctl calls. A failure leaves the socket as it was: only
  // EAGAIN proves it drained then.
  if (::epoll_ctl(reactorOf(s).*member(EpollFd{}), EPOLL_CTL_MOD, fdOf(s), &ev) == 0)
    registered = ev.events;
}
#else
bool mayBeReadable(tcp::socket&) { return true; }
void watchPeerClose(tcp::socket&) {}
#endif

void markDrained(tcp::socket& s) {
#if KVGATE_OWN_READINESS
  readiness_detail::setReadFlag(s, false);  // (an edge harvested later sets it again)
#else
  (void)s;
#endif
}

void markMaybeReadable(tcp::socket& s) {
#if KVGATE_OWN_READINESS
  readiness_detail::setReadFlag(s, true);
#else
  (void)s;
#endif
}

bool peekFindsNothing(tcp::socket& s) {
  char c;
  ssize_t n = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // (0: EOF; >0: bytes; else error)
}

bool holdsNothing(tcp::socket& s) {
  if (!mayBeReadable(s)) return true;
  if (!peekFindsNothing(s)) return false;
#if KVGATE_OWN_READINESS
  readiness_detail::setReadFlag(s, false);  // as a recv of ours finding nothing
#endif
  return true;
}

RecvResult tryRecv(tcp::socket& s, char* p, size_t n, size_t& got, error_code& ec,
                   uint32_t woke_by) {
  got = 0;
  if (!s.is_open()) {
    ec = asio::error::bad_descriptor;
    return RecvResult::kError;
  }
  if (!worthRecv(s, woke_by)) return RecvResult::kWouldBlock;
  for (;;) {
    ssize_t r = ::recv(s.native_handle(), p, n, MSG_DONTWAIT);
    if (r > 0) {
      got = static_cast<size_t>(r);
#if KVGATE_OWN_READINESS
      // Fewer bytes than asked for after an edge that reported no close and no urgent data, on a
      // socket watched for EPOLLRDHUP: the queue was emptied and no FIN waits behind the bytes
      // (it would have come with EPOLLRDHUP, or raises an edge of its own). The wait's op left
      // the flag clear, or a later edge set it: either stands. Anything else: may be more.
      const bool drained = got < n && woke_by != kUnknownEvents &&
                           (woke_by & (EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI)) == 0 &&
                           readiness_detail::watchesPeerClose(readiness_detail::descriptorOf(s));
      if (!drained) readiness_detail::setReadFlag(s, true);
#else
      (void)woke_by;
#endif
      return RecvResult::kBytes;
    }
    const int err = r < 0 ? errno : 0;
    if (err == EINTR) continue;
    const bool would_block = err == EAGAIN || err == EWOULDBLOCK;
#if KVGATE_OWN_READINESS
    // EAGAIN: nothing there, and anything arriving later raises an edge; else (EOF, an error):
    // let every later read try.
    readiness_detail::setReadFlag(s, !would_block);
#endif
    if (r == 0) return RecvResult::kEof;
    if (would_block) return RecvResult::kWouldBlock;
    ec = error_code(err, asio::error::get_system_category());
    return RecvResult::kError;
  }
}

}  // namespace kvgate::http
