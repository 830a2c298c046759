// Read readiness of our own under Asio's epoll reactor: no receive that would find nothing.
//
// Asio tries a recv before every read it is asked to wait for (a "speculative" read). On a
// keep-alive proxy that recv almost always fails with EAGAIN: right after a response is written
// the client has not sent its next request yet, and right after a request is sent the engine has
// not answered (measured before this file: 3.35 recvfrom per proxied request, 1.35 of them EAGAIN;
// nginx makes 2). nginx avoids them by remembering that a short read drained the socket; this
// file does the same with the reactor's own flag. epoll_reactor keeps per descriptor and op type
// `try_speculative_`, which it sets whenever it harvests an epoll edge for the descriptor. After
// a recv of ours finds the receive queue empty (EAGAIN, or fewer bytes than it asked for), we
// clear the flag in the same handler: no epoll_wait runs on this thread between that recv and the
// clear, so any byte that arrives later raises an edge that sets the flag again. Then a read is:
//   flag set   -> recv on the spot (bytes; or EAGAIN: clear the flag and wait);
//   flag clear -> a wait op queued with the reactor, no syscall (EPOLLIN is registered once,
//                 edge-triggered, for the descriptor's life); the next edge completes it.
// Asio's own async_wait cannot stand in: it never speculates, so it re-arms epoll with an
// epoll_ctl per wait (one syscall traded for another). The wait op here is Asio's own
// reactive_wait_op, started with speculation allowed.
//
// Requirements: the socket's io_context is run by one thread (each worker's is); plain TCP (TLS
// reads go through OpenSSL). This reaches into Boost.Asio 1.74's epoll reactor (Debian 12's
// Boost), so it is compiled only there; any other build falls back to Asio's async_wait (correct,
// with the epoll_ctl) and tells so through ownReadiness().
#pragma once
#include <sys/types.h>

#include <boost/version.hpp>

#include "http/asio.h"

#if BOOST_VERSION == 107400 && defined(BOOST_ASIO_HAS_EPOLL) && !defined(BOOST_ASIO_HAS_IO_URING)
#define KVGATE_OWN_READINESS 1
#include <boost/asio/detail/epoll_reactor.hpp>
#include <boost/asio/detail/reactive_wait_op.hpp>
#else
#define KVGATE_OWN_READINESS 0
#endif

namespace kvgate::http {

// True when this build tracks readiness itself (the fast path above).
constexpr bool ownReadiness() { return KVGATE_OWN_READINESS != 0; }

// What tryRecv did.
enum class RecvResult { kBytes, kEof, kWouldBlock, kError };

// One receive of ours on a plain TCP socket, only when bytes may be there: up to `n` bytes into
// `p` (their count in `got`). kWouldBlock: nothing to read now (the socket is known drained, so
// no syscall was made, or the recv found nothing); wait with asyncWaitReadable, then call again.
// A short read or EAGAIN marks the socket drained. kError sets `ec`.
RecvResult tryRecv(tcp::socket& s, char* p, size_t n, size_t& got, error_code& ec);

// Whether the socket may hold unread bytes (false only when a recv of ours drained it and no
// epoll edge came since). Always true without own readiness.
bool mayBeReadable(tcp::socket& s);
// Records that a recv of ours has just found the socket's receive queue empty. Call it in the
// same handler as that recv, never after a co_await.
void noteDrained(tcp::socket& s);

#if KVGATE_OWN_READINESS
namespace readiness_detail {
using Reactor = asio::detail::epoll_reactor;
Reactor& reactorOf(tcp::socket& s);
int fdOf(tcp::socket& s);
Reactor::per_descriptor_data& descriptorOf(tcp::socket& s);

struct InitiateWaitReadable {
  template <typename Handler>
  void operator()(Handler&& handler, tcp::socket* s) const {
    using H = std::decay_t<Handler>;
    using Op = asio::detail::reactive_wait_op<H, tcp::socket::executor_type>;
    H h(std::forward<Handler>(handler));
    typename Op::ptr p = {asio::detail::addressof(h), Op::ptr::allocate(h), nullptr};
    p.p = new (p.v) Op(error_code(), h, s->get_executor());
    // Speculation allowed: completes at once (posted) when an edge came since the last drain,
    // else queued without a syscall.
    reactorOf(*s).start_op(Reactor::read_op, fdOf(*s), descriptorOf(*s), p.p, false, true);
    p.v = p.p = nullptr;
  }
};
}  // namespace readiness_detail
#endif

// Waits until the socket may be readable (an epoll edge since the last drain; an error or a close
// of the socket completes it too, cancel() aborts it). Completion signature void(error_code).
template <typename Token>
auto asyncWaitReadable(tcp::socket& s, Token&& token) {
#if KVGATE_OWN_READINESS
  return asio::async_initiate<Token, void(error_code)>(readiness_detail::InitiateWaitReadable{},
                                                       token, &s);
#else
  return s.async_wait(tcp::socket::wait_read, std::forward<Token>(token));
#endif
}

}  // namespace kvgate::http
