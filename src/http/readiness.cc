// Own read readiness under Asio's epoll reactor: see readiness.h for the algorithm and why it is
// safe. The two accessors below are the only places that reach into Asio's private state.
#include "http/readiness.h"

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

// epoll_reactor::descriptor_state::try_speculative_ is private: its address is taken in an
// explicit instantiation (where access is not checked) and handed out by a friend function.
using DescriptorState = std::remove_pointer_t<Reactor::per_descriptor_data>;
struct TrySpeculative {
  using type = bool (DescriptorState::*)[Reactor::max_ops];
  friend type member(TrySpeculative);
};
template <typename Tag, typename Tag::type M>
struct Expose {
  friend typename Tag::type member(Tag) { return M; }
};
template struct Expose<TrySpeculative, &DescriptorState::try_speculative_>;

bool* readFlag(tcp::socket& s) {
  DescriptorState* d = SocketAccess::impl(s).reactor_data_;
  if (!d) return nullptr;
  return &((d->*member(TrySpeculative{}))[Reactor::read_op]);
}

}  // namespace

Reactor& reactorOf(tcp::socket& s) {
  // One reactor per io_context; a worker thread runs one io_context, so cache it per thread.
  thread_local asio::execution_context* ctx = nullptr;
  thread_local Reactor* reactor = nullptr;
  asio::execution_context& c = asio::query(s.get_executor(), asio::execution::context);
  if (&c != ctx) {
    reactor = &asio::use_service<Reactor>(c);
    ctx = &c;
  }
  return *reactor;
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

void noteDrained(tcp::socket& s) {
  if (bool* f = readiness_detail::readFlag(s)) *f = false;
}
#else
bool mayBeReadable(tcp::socket&) { return true; }
void noteDrained(tcp::socket&) {}
#endif

RecvResult tryRecv(tcp::socket& s, char* p, size_t n, size_t& got, error_code& ec) {
  got = 0;
  if (!s.is_open()) {
    ec = asio::error::bad_descriptor;
    return RecvResult::kError;
  }
  if (!mayBeReadable(s)) return RecvResult::kWouldBlock;
  for (;;) {
    ssize_t r = ::recv(s.native_handle(), p, n, MSG_DONTWAIT);
    if (r > 0) {
      got = static_cast<size_t>(r);
      if (got < n) noteDrained(s);  // fewer bytes than asked for: the queue is empty now
      return RecvResult::kBytes;
    }
    if (r == 0) return n == 0 ? RecvResult::kBytes : RecvResult::kEof;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      noteDrained(s);
      return RecvResult::kWouldBlock;
    }
    ec = error_code(errno, asio::error::get_system_category());
    return RecvResult::kError;
  }
}

}  // namespace kvgate::http
