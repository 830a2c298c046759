// The one place that includes Asio for kvgate: coroutine helpers and the connection deadline.
#pragma once
#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <string_view>
#include <utility>  // Boost 1.74 asio/awaitable.hpp misses it under GCC 12

namespace kvgate {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// `co_await op(..., kUse[ec])`: completion token that stores the error instead of throwing.
inline auto useEc(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

// An accept that failed for want of a resource: 1 descriptors (EMFILE, ENFILE), 2 memory
// (ENOBUFS, ENOMEM), 0 anything else. The connection stays in the backlog and the listener
// readable, so an accept loop must pause before retrying, not spin a core.
inline int acceptStarved(const error_code& ec) {
  if (ec == asio::error::no_descriptors || ec.value() == ENFILE) return 1;
  if (ec == asio::error::no_buffer_space || ec == asio::error::no_memory) return 2;
  return 0;
}

// One deadline per connection: a single timer that runs `on_expire` when the current phase
// overruns. Moving the deadline is a field write; only a deadline earlier than the timer's
// next wake-up (at most kTick ahead) re-arms it. The timer wakes at least every kTick; an
// optional `on_tick` runs on each wake-up that is not an expiry (work that may wait a second).
// The watchdog coroutine owns the shared state, so destroying the Deadline is always safe.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Deadline(const asio::any_io_executor& ex) : s_(std::make_shared<State>(ex)) {}
  ~Deadline() { stop(); }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  // Starts the watchdog; `on_expire` runs (once per expiry) on the connection's executor.
  static constexpr std::chrono::seconds kTick{1};
  template <typename F, typename G = void (*)()>
  void start(
      F on_expire, G on_tick = [] {}) {
    asio::co_spawn(s_->timer.get_executor(), run(s_, std::move(on_expire), std::move(on_tick)),
                   asio::detached);
  }
  void expireAfter(Clock::duration d) { set(Clock::now() + d); }
  void set(Clock::time_point when) {
    s_->deadline = when;
    s_->expired = false;
    if (when < s_->armed) s_->timer.cancel();  // rare: phases under a second (connect)
  }
  void clear() { s_->deadline = Clock::time_point::max(); }
  void stop() {
    if (s_->stopped) return;
    s_->stopped = true;
    s_->timer.cancel();
  }
  bool expired() const { return s_->expired; }

 private:
  struct State {
    explicit State(const asio::any_io_executor& ex) : timer(ex) {}
    asio::steady_timer timer;
    Clock::time_point deadline = Clock::time_point::max();
    Clock::time_point armed = Clock::time_point::max();  // when the timer fires next
    bool stopped = false;
    bool expired = false;
  };
  template <typename F, typename G>
  static asio::awaitable<void> run(std::shared_ptr<State> s, F on_expire, G on_tick) {
    while (!s->stopped) {
      // Wake at the deadline or within kTick, whichever is first: moving the deadline later, or
      // between the multi-second timeouts of the request phases, then never touches the timer
      // (re-arming a timer costs a timerfd_settime syscall whenever it becomes the earliest).
      s->armed = std::min(s->deadline, Clock::now() + kTick);
      s->timer.expires_at(s->armed);
      error_code ec;
      co_await s->timer.async_wait(useEc(ec));
      if (s->stopped) break;
      if (Clock::now() >= s->deadline) {
        s->expired = true;
        s->deadline = Clock::time_point::max();
        on_expire();
      } else {
        on_tick();
      }
    }
  }
  std::shared_ptr<State> s_;
};

// Writes `a` then `b`: first one non-blocking gather write on the spot (the socket must be in
// non-blocking mode); only what the kernel did not take goes through the reactor. A write that
// completes at once then costs one syscall and no trip through the scheduler (most responses
// and SSE events). Returns the error, if any.
// The first half of writeTwo without a coroutine frame: one non-blocking gather write. Returns
// true when everything was written (or an error happened: `ec` set); false when the rest, after
// `n` bytes, must go through writeRest().
inline bool writeNow(tcp::socket& s, std::string_view a, std::string_view b, size_t& n,
                     error_code& ec) {
  std::array<asio::const_buffer, 2> bufs{asio::buffer(a.data(), a.size()),
                                         asio::buffer(b.data(), b.size())};
  const size_t total = a.size() + b.size();
  n = total == 0 ? 0 : s.write_some(bufs, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    ec = {};
    n = 0;
  }
  return ec || n == total;
}

// The bytes of `a` then `b` after the first `n`, through the reactor.
inline asio::awaitable<error_code> writeRest(tcp::socket& s, std::string_view a, std::string_view b,
                                             size_t n) {
  std::array<asio::const_buffer, 2> bufs{asio::buffer(a.data(), a.size()),
                                         asio::buffer(b.data(), b.size())};
  error_code ec;
  if (n < a.size()) {
    bufs[0] = asio::buffer(a.data() + n, a.size() - n);
  } else {
    bufs[0] = asio::buffer(b.data() + (n - a.size()), b.size() - (n - a.size()));
    bufs[1] = asio::const_buffer();
  }
  co_await asio::async_write(s, bufs, useEc(ec));
  co_return ec;
}

inline asio::awaitable<error_code> writeTwo(tcp::socket& s, std::string_view a,
                                            std::string_view b) {
  size_t n = 0;
  error_code ec;
  if (writeNow(s, a, b, n, ec)) co_return ec;
  co_return co_await writeRest(s, a, b, n);
}

// Closes a connection after an error response without losing that response: shuts down the
// sending side, then reads and discards what the client is still sending (bounded in time and
// bytes) so the kernel does not answer the client's unread data with a reset.
inline asio::awaitable<void> lingeringClose(
    tcp::socket& s, std::chrono::milliseconds max_wait = std::chrono::milliseconds(2000),
    size_t max_bytes = 64 * 1024 * 1024) {
  error_code ec;
  s.shutdown(tcp::socket::shutdown_send, ec);
  Deadline d(s.get_executor());
  d.start([&s] {
    error_code e;
    s.close(e);
  });
  d.expireAfter(max_wait);
  char buf[16384];
  size_t total = 0;
  while (s.is_open() && total < max_bytes) {
    size_t n = co_await s.async_read_some(asio::buffer(buf), useEc(ec));
    if (ec || n == 0) break;
    total += n;
  }
  d.stop();
  s.close(ec);
}

}  // namespace kvgate
