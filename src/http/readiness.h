// Read readiness of our own under Asio's epoll reactor: no receive that would find nothing.
//
// Asio tries a recv before every read it is asked to wait for (a "speculative" read), and the
// upstream pool checked every reuse with a MSG_PEEK: on a keep-alive proxy these fail with EAGAIN
// about once per proxied request (measured: 3.35 recvfrom per request, 1.35 of them EAGAIN;
// nginx makes 2). nginx avoids them by remembering that a short read drained the socket, unless
// epoll reported the peer's close (EPOLLRDHUP) with the bytes. This file does the same on the
// reactor's own state:
//
// - epoll_reactor keeps per descriptor a flag `try_speculative_[read_op]` that it sets whenever
//   it harvests an epoll edge for the descriptor. A flag clear means: no byte and no close came
//   since a recv of ours proved the receive queue empty; a read then costs no syscall until the
//   next edge sets it again.
// - A read is: flag set -> recv on the spot; flag clear -> a wait op queued with the reactor, no
//   syscall. The edge performs the op, which records the edge's events and clears the flag (the
//   reactor has just set it, before performing the op); the recv follows in the op's completion.
//   An edge harvested after that one (bytes or a FIN that came later) sets the flag again when
//   the reactor performs it, so no byte or close is lost. The completion normally runs at once
//   (the first op an edge completes is invoked inline); only when another op of the descriptor
//   completes on the same edge (our reads and writes of one socket never overlap) is it queued,
//   and a later edge may then be queued behind it: until that edge is performed a pool check may
//   skip its peek of a connection whose FIN is queued, which the pool's rule covers (a reused
//   connection failing before any response byte is retried on a fresh one).
// - After that recv the flag stays clear only when the recv proved the queue empty as of the
//   edge: a short read (fewer bytes than asked for) after an edge whose events carry none of
//   EPOLLRDHUP, EPOLLHUP, EPOLLERR, EPOLLPRI, on a socket registered for EPOLLRDHUP
//   (watchPeerClose). Otherwise (a full read, a close or urgent data reported with the edge, a
//   socket not watched for EPOLLRDHUP) the recv sets the flag: a FIN that came with the bytes is
//   reported only by the next recv and raises no further edge, and a recv stops short at the
//   urgent mark. A recv that fails with EAGAIN clears the flag: nothing is there, and anything
//   arriving later raises an edge harvested by a later epoll_wait.
// - epoll reports a socket's state at the harvest (a FIN already queued shows as EPOLLRDHUP), and
//   every later arrival raises a new edge (EPOLLET, registered once for the descriptor's life).
//   Asio's own async_wait cannot stand in: it never speculates, so it re-arms epoll with an
//   epoll_ctl per wait (one syscall traded for another), and it does not report the events.
//
// Requirements: the socket's io_context is run by one thread (each worker's is); plain TCP (TLS
// reads go through OpenSSL). This reaches into Boost.Asio 1.74's epoll reactor (Debian 12's
// Boost), so it is compiled only there; any other build falls back to Asio's async_wait (correct,
// with the epoll_ctl and a recv that may find nothing) and says so through ownReadiness().
#pragma once
#include <sys/types.h>

#include <boost/version.hpp>
#include <cstdint>

#include "http/asio.h"

#if BOOST_VERSION == 107400 && defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING)
#define KVGATE_OWN_READINESS 1
#include <boost/asio/detail/bind_handler.hpp>
#include <boost/asio/detail/epoll_reactor.hpp>
#include <boost/asio/detail/fenced_block.hpp>
#include <boost/asio/detail/handler_alloc_helpers.hpp>
#include <boost/asio/detail/handler_work.hpp>
#include <boost/asio/detail/reactor_op.hpp>
#else
#define KVGATE_OWN_READINESS 0
#endif

namespace kvgate::http {

// True when this build tracks readiness itself (the fast path above).
constexpr bool ownReadiness() { return KVGATE_OWN_READINESS != 0; }

// The epoll events that woke a wait, or kUnknownEvents: the wait completed at once (an edge had
// come before it was queued), was cancelled, or runs without own readiness.
constexpr uint32_t kUnknownEvents = ~0u;

// What tryRecv did.
enum class RecvResult { kBytes, kEof, kWouldBlock, kError };

// One receive of ours on a plain TCP socket, only when bytes may be there: up to `n` bytes into
// `p` (their count in `got`). kWouldBlock: nothing to read now (the socket is known drained, so no
// syscall was made, or the recv found nothing); wait with asyncWaitReadable, then call again with
// the events it returned (kUnknownEvents otherwise): after a wait that reported its events the
// recv is made whatever the flag says (the edge was handed to it). kError sets `ec`.
RecvResult tryRecv(tcp::socket& s, char* p, size_t n, size_t& got, error_code& ec,
                   uint32_t woke_by = kUnknownEvents);

// Registers the socket for EPOLLRDHUP (one epoll_ctl, once per socket), so that a short read can
// prove the socket drained; until then only EAGAIN does. No-op without own readiness.
void watchPeerClose(tcp::socket& s);

// Whether the socket may hold unread bytes or an unread close (false only when a recv of ours
// proved it drained and no epoll edge came since). Always true without own readiness.
bool mayBeReadable(tcp::socket& s);

// A read of the caller's own on the descriptor (OpenSSL's, which reads the socket itself) has
// just met EAGAIN, on this thread, with no epoll_wait since: the socket holds nothing until the
// next edge, so asyncWaitReadable queues without a syscall. No-op without own readiness.
void markDrained(tcp::socket& s);
// The edge a wait reported is handed to a reader whose result this file cannot see (OpenSSL's:
// a full read leaves bytes, a FIN reported with the bytes raises no further edge): the socket
// may hold bytes or a close until markDrained says otherwise. No-op without own readiness.
void markMaybeReadable(tcp::socket& s);

// Whether a non-blocking MSG_PEEK finds nothing on the socket (EAGAIN: no byte, no close, no
// error). Consumes nothing; any socket, TLS ones included.
bool peekFindsNothing(tcp::socket& s);

// Whether a plain TCP socket holds neither bytes nor a close: known drained (no syscall), or
// peekFindsNothing, which then marks it drained like a recv of ours. For an idle pooled
// connection about to be reused.
bool holdsNothing(tcp::socket& s);

// Whether tryRecv(s, ..., woke_by) would make a recv: after a wait that reported its events, or
// when the socket may be readable.
inline bool worthRecv(tcp::socket& s, uint32_t woke_by) {
  return woke_by != kUnknownEvents || mayBeReadable(s);
}

#if KVGATE_OWN_READINESS
namespace readiness_detail {
using Reactor = asio::detail::epoll_reactor;
using DescriptorState = std::remove_pointer_t<Reactor::per_descriptor_data>;
Reactor& reactorOf(tcp::socket& s);
int fdOf(tcp::socket& s);
Reactor::per_descriptor_data& descriptorOf(tcp::socket& s);
uint32_t harvestedEvents(DescriptorState* d);  // the events of the edge being performed

void clearReadFlag(DescriptorState* d);  // the edge being performed is handed to our recv

// A reactor op that waits for an edge and completes with the events that woke it.
template <typename Handler, typename IoExecutor>
class EdgeWaitOp : public asio::detail::reactor_op {
 public:
  BOOST_ASIO_DEFINE_HANDLER_PTR(EdgeWaitOp);

  EdgeWaitOp(Handler& h, const IoExecutor& ex, DescriptorState* d)
      : reactor_op(error_code(), &EdgeWaitOp::doPerform, &EdgeWaitOp::doComplete),
        handler_(std::move(h)),
        work_(handler_, ex),
        descriptor_(d) {}

  bool starting = true;  // while start_op runs: a perform then is speculative, no edge behind it

 private:
  static status doPerform(reactor_op* base) {
    auto* o = static_cast<EdgeWaitOp*>(base);
    if (o->starting || !o->descriptor_) return done;  // (events unknown)
    o->events_ = harvestedEvents(o->descriptor_);
    clearReadFlag(o->descriptor_);  // our recv decides; a later edge sets it again
    return done;
  }

  static void doComplete(void* owner, asio::detail::operation* base, const error_code&,
                         std::size_t) {
    auto* o = static_cast<EdgeWaitOp*>(base);
    ptr p = {asio::detail::addressof(o->handler_), o, o};
    asio::detail::handler_work<Handler, IoExecutor> w(std::move(o->work_));
    // (the handler is moved out so the op's memory is freed before the upcall)
    asio::detail::binder2<Handler, error_code, uint32_t> call(o->handler_, o->ec_, o->events_);
    p.h = asio::detail::addressof(call.handler_);
    p.reset();
    if (owner) {
      asio::detail::fenced_block b(asio::detail::fenced_block::half);
      w.complete(call, call.handler_);
    }
  }

  Handler handler_;
  asio::detail::handler_work<Handler, IoExecutor> work_;
  DescriptorState* descriptor_;
  uint32_t events_ = kUnknownEvents;
};

struct InitiateWaitReadable {
  template <typename Handler>
  void operator()(Handler&& handler, tcp::socket* s) const {
    using H = std::decay_t<Handler>;
    using Op = EdgeWaitOp<H, tcp::socket::executor_type>;
    H h(std::forward<Handler>(handler));
    Reactor::per_descriptor_data& d = descriptorOf(*s);
    typename Op::ptr p = {asio::detail::addressof(h), Op::ptr::allocate(h), nullptr};
    p.p = new (p.v) Op(h, s->get_executor(), d);
    Op* op = p.p;
    p.v = p.p = nullptr;
    // Speculation allowed: completes at once (posted) when an edge came since the last drain,
    // else queued without a syscall. Single thread: the op is alive until its completion runs.
    reactorOf(*s).start_op(Reactor::read_op, fdOf(*s), d, op, false, true);
    op->starting = false;
  }
};
}  // namespace readiness_detail
#endif

// Waits until the socket may be readable: an epoll edge since the last proven drain (a close or
// an error of the socket completes it too; cancel() and close() abort it). Completion signature
// void(error_code, uint32_t events): the events that woke it, or kUnknownEvents.
template <typename Token>
auto asyncWaitReadable(tcp::socket& s, Token&& token) {
#if KVGATE_OWN_READINESS
  return asio::async_initiate<Token, void(error_code, uint32_t)>(
      readiness_detail::InitiateWaitReadable{}, token, &s);
#else
  return asio::async_initiate<Token, void(error_code, uint32_t)>(
      [](auto&& handler, tcp::socket* sock) {
        sock->async_wait(tcp::socket::wait_read,
                         [h = std::move(handler)](const error_code& ec) mutable {
                           std::move(h)(ec, kUnknownEvents);
                         });
      },
      token, &s);
#endif
}

}  // namespace kvgate::http
