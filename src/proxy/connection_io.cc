// ClientConn's socket (client_conn.h): client reads and writes, plain or TLS, the 408 of a
// request too slow to arrive, and the client-disconnect watcher.
#include <sys/socket.h>

#include <cerrno>

#include "common/log.h"
#include "http/readiness.h"
#include "http/tls.h"
#include "proxy/client_conn.h"

namespace kvgate::proxy {

asio::awaitable<bool> ClientConn::readMore(Buffer& b) {
  error_code ec;
  size_t n = 0;
  tcp::socket& s = client_;
  if (tls_) {
    if (!pipelined_.empty()) {  // (decrypted by the watcher: they come first)
      b.append(pipelined_.data(), pipelined_.size());
      pipelined_.clear();
      co_return true;
    }
    auto room = b.prepare(kReadChunk);
    n = co_await tls_->readSome(client_, static_cast<char*>(room.data()), room.size(), ec);
    client_eof_ |= ec || n == 0;
    if (ec || n == 0) co_return false;
    b.commit(n);
    co_return true;
  }
  // Plain TCP: a recv only when bytes may be there, else a wait that costs no syscall
  // (http/readiness.h); the buffer's room is taken when the bytes are.
  for (uint32_t woke_by = http::kUnknownEvents;;) {
    auto room = b.prepare(kReadChunk);
    switch (http::tryRecv(s, static_cast<char*>(room.data()), room.size(), n, ec, woke_by)) {
      case http::RecvResult::kBytes:
        b.commit(n);
        co_return true;
      case http::RecvResult::kWouldBlock:
        break;
      default:
        co_return false;
    }
    http::watchPeerClose(s);  // (once per connection: lets a short read prove it drained)
    woke_by = co_await http::asyncWaitReadable(s, useEc(ec));
    if (ec) co_return false;
  }
}

asio::awaitable<bool> ClientConn::write(std::string_view a, std::string_view b) {
  if (tls_) co_return !(co_await tls_->write(client_, a, b));
  co_return !(co_await writeTwo(client_, a, b));
}

// Plain TCP: one non-blocking gather write on the spot (TLS: none; OpenSSL writes it all).
bool ClientConn::writeNow(std::string_view a, std::string_view b, size_t& written, error_code& ec) {
  written = 0;
  return !tls_ && kvgate::writeNow(client_, a, b, written, ec);
}

asio::awaitable<error_code> ClientConn::writeRest(std::string_view a, std::string_view b,
                                                  size_t written) {
  if (tls_) co_return co_await tls_->write(client_, a, b);  // (writeNow wrote nothing)
  co_return co_await kvgate::writeRest(client_, a, b, written);
}

// The deadline expired while the head or the body was read: a 408 on the spot (TLS: no
// plaintext on the wire; the connection just closes).
void ClientConn::requestTimedOut() {
  static const char k408[] =
      "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: "
      "close\r\nContent-Length: 116\r\n\r\n{\"error\":{\"message\":\"request header or body "
      "not received in time\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":"
      "\"timeout\"}}";
  if (!tls_) ::send(client_.native_handle(), k408, sizeof(k408) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

asio::awaitable<bool> ClientConn::acceptTls(const http::TlsFiles& files,
                                            const std::shared_ptr<asio::ssl::context>& ctx) {
  tls_ctx_ = ctx;
  error_code ec;
  // (OpenSSL reads and writes the descriptor itself; the accept loop made it non-blocking)
  if (!client_.non_blocking()) client_.non_blocking(true, ec);
  tls_ = std::make_unique<http::FdTls>(client_, tls_ctx_->native_handle());
  ex_->setPhase(Phase::kHead);  // (the deadline's expiry closes a stalled handshake)
  ex_->deadline().expireAfter(w_.opts.header_timeout);
  ec = tls_->ok() ? co_await tls_->handshake(client_, true) : asio::error::no_memory;
  ex_->deadline().clear();
  ex_->setPhase(Phase::kIdle);
  files.noteHandshake(tls_->native(), ec);
  if (ec) {
    w_.stats.tls_handshake_failures.fetch_add(1, std::memory_order_relaxed);
    log::debug("proxy", "TLS handshake failed: " + ec.message());
    close();
    co_return false;
  }
  w_.stats.tls_handshakes.fetch_add(1, std::memory_order_relaxed);
  co_return true;
}

// The exchange waits on its upstream (Exchange::onTick): the watcher starts, unless it runs or
// already holds the bound of pipelined bytes (then TCP pushes back on the client).
void ClientConn::watch() {
  if (watch_running_ || pipelined_.size() >= kMaxPipelinedBytes) return;
  watching_ = true;
  startWatch();
}

void ClientConn::startWatch() {
  watch_running_ = true;
  armWatch(++watch_gen_);
}

// Watches the client socket while the upstream makes us wait: EOF or an error means the client
// went away, so the upstream connection is closed and the engine aborts the request. Bytes of a
// pipelined request are kept (at most kMaxPipelinedBytes; then the watcher stops and TCP pushes
// back) for the next request. No coroutine and no buffer while it waits: a readiness wait whose
// handler holds the connection and the watch's generation (an open stream costs one small
// reactor op). The socket is read on the spot first: bytes or a close that came before the wait
// was armed raise no new edge for it.
void ClientConn::armWatch(uint64_t gen) {
  bool want_write = false;  // (TLS: wait until the socket takes bytes, then read again)
  for (;;) {
    if (pipelined_.size() >= kMaxPipelinedBytes) {
      watch_running_ = false;
      return;
    }
    char buf[4096];
    size_t room = std::min(sizeof buf, kMaxPipelinedBytes - pipelined_.size());
    if (tls_) {  // (decrypted bytes of a pipelined request; OpenSSL's buffered records first)
      if (tls_->writing()) {  // a record half-sent: read after it (the writer sees a close too)
        want_write = true;
        break;
      }
      error_code ec;
      http::FdTls::Want want = http::FdTls::Want::kNothing;
      const size_t got = tls_->readNow(client_, buf, room, ec, want);
      if (got > 0) {
        pipelined_.append(buf, got);
        continue;
      }
      if (want != http::FdTls::Want::kNothing) {
        want_write = want == http::FdTls::Want::kWrite;
        break;
      }
    } else {
      ssize_t n = ::recv(client_.native_handle(), buf, room, MSG_DONTWAIT);
      if (n > 0) {
        pipelined_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    }
    watch_running_ = false;
    ex_->clientLeft();  // EOF or error: the engine sees the disconnect and aborts the request
    return;
  }
  client_.async_wait(want_write ? tcp::socket::wait_write : tcp::socket::wait_read,
                     [self = shared_from_this(), gen](const error_code&) {
                       // A stopped watch (cancelled, or an older generation) leaves the connection
                       // alone.
                       if (gen != self->watch_gen_ || !self->watching_ || !self->watch_running_)
                         return;
                       self->armWatch(gen);  // readable (or closed): read it
                     });
}

// Stops the watcher: its pending wait is cancelled and its completion, when it runs, sees a newer
// generation and does nothing. The wait reads nothing, so the connection may read the client
// again at once.
void ClientConn::unwatch() {
  if (!watching_) return;
  watching_ = false;
  ++watch_gen_;
  if (!watch_running_) return;
  watch_running_ = false;
  error_code ec;
  client_.cancel(ec);
}

}  // namespace kvgate::proxy
