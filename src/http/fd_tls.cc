#include "http/fd_tls.h"

#include "http/readiness.h"

#include <openssl/err.h>

#include <boost/asio/ssl/error.hpp>

#include <cerrno>
#include <string>

namespace kvgate::http {
namespace {

constexpr size_t kOneRecord = 16 * 1024;  // a TLS record's largest plaintext

}  // namespace

FdTls::FdTls(tcp::socket& sock, SSL_CTX* ctx) : ssl_(SSL_new(ctx)) {
  if (ssl_ && SSL_set_fd(ssl_, sock.native_handle()) != 1) {
    SSL_free(ssl_);
    ssl_ = nullptr;
  }
  if (ssl_) {
    SSL_clear_mode(ssl_, SSL_MODE_AUTO_RETRY);
    SSL_set_mode(ssl_, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    // One read per flight rather than two per record (a header, then the body): what is read
    // ahead stays in OpenSSL's buffer, which pending() (SSL_has_pending) counts, so no reader
    // waits on the socket for bytes OpenSSL already holds (measured: 8 -> 4 reads a handshake).
    SSL_set_read_ahead(ssl_, 1);
  }
}

FdTls::~FdTls() {
  if (ssl_) SSL_free(ssl_);  // (never closes the descriptor: the socket owns it)
}

// The error an SSL call met (SSL_get_error's value, not a WANT_*).
error_code FdTls::errorOf(int err) const {
  error_code ec;
  if (err == SSL_ERROR_ZERO_RETURN) {
    ec = asio::error::eof;
  } else if (err == SSL_ERROR_SSL) {
    const unsigned long e = ERR_get_error();
    ec = error_code(static_cast<int>(e), asio::error::get_ssl_category());
    if (!e) ec = asio::error::connection_aborted;
  } else if (err == SSL_ERROR_SYSCALL) {
    ec = errno != 0 ? error_code(errno, asio::error::get_system_category())
                    : error_code(asio::error::eof);
  } else {
    ec = asio::error::connection_aborted;
  }
  ERR_clear_error();
  return ec;
}

// After an SSL call returned `ssl_result` <= 0: wait for what it wants, or the error it met.
asio::awaitable<error_code> FdTls::waitFor(tcp::socket& sock, int ssl_result, bool read_last) {
  const int err = SSL_get_error(ssl_, ssl_result);
  if (err == SSL_ERROR_WANT_READ) co_return co_await waitFor(sock, Want::kRead, read_last);
  if (err == SSL_ERROR_WANT_WRITE) co_return co_await waitFor(sock, Want::kWrite, false);
  co_return errorOf(err);
}

asio::awaitable<error_code> FdTls::waitFor(tcp::socket& sock, Want want, bool drained) {
  error_code ec;
  if (want == Want::kRead && ownReadiness()) {
    // As nginx waits: OpenSSL's read has just met EAGAIN (errno says so right after the call), so
    // the socket is marked drained and the
    // wait is queued on the descriptor's standing edge-triggered registration without a syscall
    // (http/readiness.h); the next edge (bytes, a close, an error) completes it. Not drained: it
    // completes at once when the socket may be readable. The edge goes to OpenSSL's next read,
    // whose result is not seen here (a full read leaves bytes; a FIN that came with the bytes
    // raises no further edge), so the socket counts as maybe readable until a WANT_READ says
    // otherwise. OpenSSL reports a close itself (close_notify, or a truncation). Measured: 4 -> 0
    // receive calls a handshake besides OpenSSL's reads.
    if (drained) markDrained(sock);
    co_await asyncWaitReadable(sock, useEc(ec));
    markMaybeReadable(sock);
  } else if (want == Want::kRead) {
    // A one-byte peek rather than a readiness wait: Asio tries it at once (until a read of this
    // socket has completed with 0 bytes: EOF or an error) and otherwise queues it on the
    // descriptor's standing edge-triggered registration, where async_wait re-arms epoll with an
    // epoll_ctl every time (a syscall per TLS read, measured). A peeked EOF is left for OpenSSL
    // to report: close_notify, or a truncation (an error, so a bare TCP close never passes for
    // the clean end of an until-close body).
    char byte;
    co_await sock.async_receive(asio::buffer(&byte, 1), tcp::socket::message_peek, useEc(ec));
    if (ec == asio::error::eof) ec = {};
  } else {
    co_await sock.async_wait(tcp::socket::wait_write, useEc(ec));
  }
  co_return ec;
}

size_t FdTls::readNow(tcp::socket& sock, char* p, size_t n, error_code& ec, Want& want) {
  ec = {};
  want = Want::kNothing;
  if (!sock.is_open()) {
    ec = asio::error::operation_aborted;
    return 0;
  }
  ERR_clear_error();
  errno = 0;
  size_t got = 0;
  const int r = SSL_read_ex(ssl_, p, n, &got);
  read_met_eagain_ = errno == EAGAIN || errno == EWOULDBLOCK;  // (before any other call)
  if (r == 1) return got;
  const int err = SSL_get_error(ssl_, r);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    want = err == SSL_ERROR_WANT_READ ? Want::kRead : Want::kWrite;
    ERR_clear_error();
    return 0;
  }
  ec = errorOf(err);
  return 0;
}

asio::awaitable<error_code> FdTls::shutdown(tcp::socket& sock) {
  for (;;) {  // (bounded by the caller's deadline, which closes the socket)
    if (!sock.is_open()) co_return asio::error::operation_aborted;
    ERR_clear_error();
    errno = 0;
    const int r = SSL_shutdown(ssl_);
    if (r >= 0) co_return error_code{};  // (0: ours sent, the peer's not awaited)
    if (error_code ec = co_await waitFor(sock, r, false)) co_return ec;  // (WANT_WRITE: wait)
  }
}

asio::awaitable<error_code> FdTls::handshake(tcp::socket& sock, bool server) {
  if (!ssl_) co_return asio::error::no_memory;
  for (;;) {
    if (!sock.is_open()) co_return asio::error::operation_aborted;
    ERR_clear_error();
    errno = 0;
    const int r = server ? SSL_accept(ssl_) : SSL_connect(ssl_);
    read_met_eagain_ = errno == EAGAIN || errno == EWOULDBLOCK;
    if (r == 1) co_return error_code{};
    if (error_code ec = co_await waitFor(sock, r, read_met_eagain_)) co_return ec;
  }
}

asio::awaitable<size_t> FdTls::readSome(tcp::socket& sock, char* p, size_t n, error_code& ec) {
  ec = {};
  // OpenSSL reads first: after each wait the socket counts as maybe readable (waitFor), so a
  // read right after a write costs one recv that finds nothing, then a wait with no syscall.
  for (;;) {
    Want want = Want::kNothing;
    const size_t got = readNow(sock, p, n, ec, want);
    if (got > 0 || ec) co_return got;
    // (a WANT_READ after a post-handshake message - a TLS 1.3 session ticket or key update, with
    // auto-retry off - comes without OpenSSL's read meeting EAGAIN: more may be on the socket)
    ec = co_await waitFor(sock, want, want == Want::kRead && read_met_eagain_);
    if (ec) co_return 0;
  }
}

asio::awaitable<error_code> FdTls::writeAll(tcp::socket& sock, std::string_view d) {
  while (!d.empty()) {
    if (!sock.is_open()) co_return asio::error::operation_aborted;
    ERR_clear_error();
    errno = 0;
    size_t put = 0;
    const int r = SSL_write_ex(ssl_, d.data(), d.size(), &put);  // (retried with the same bytes)
    if (r == 1) {
      d.remove_prefix(put);
      continue;
    }
    writing_ = true;  // (until the retry completes: a record may be half-sent)
    const error_code ec = co_await waitFor(sock, r, false);
    if (ec) {
      writing_ = false;
      co_return ec;
    }
  }
  writing_ = false;
  co_return error_code{};
}

asio::awaitable<error_code> FdTls::write(tcp::socket& sock, std::string_view a, std::string_view b) {
  if (a.empty()) co_return co_await writeAll(sock, b);
  if (!b.empty() && a.size() + b.size() <= kOneRecord) {
    const std::string joined = std::string(a).append(b);
    co_return co_await writeAll(sock, joined);
  }
  if (error_code ec = co_await writeAll(sock, a)) co_return ec;
  co_return co_await writeAll(sock, b);
}

asio::awaitable<error_code> clientHandshake(tcp::socket& sock, const TlsFiles& files,
                                            const std::string& name,
                                            std::shared_ptr<asio::ssl::context>& ctx,
                                            std::unique_ptr<FdTls>& out, std::string_view alpn) {
  ctx = files.current();
  error_code ec;
  if (!sock.non_blocking()) sock.non_blocking(true, ec);  // (OpenSSL uses the descriptor itself)
  out = std::make_unique<FdTls>(sock, ctx->native_handle());
  if (!out->ok()) co_return asio::error::no_memory;
  if (!files.prepareClient(out->native(), name))
    co_return asio::error::invalid_argument;  // (not a host name or address to verify)
  if (!alpn.empty() &&
      SSL_set_alpn_protos(out->native(), reinterpret_cast<const unsigned char*>(alpn.data()),
                          static_cast<unsigned int>(alpn.size())) != 0)
    co_return asio::error::no_memory;
  co_return co_await out->handshake(sock);
}

asio::awaitable<size_t> SocketOrTls::readSome(char* p, size_t n, error_code& ec) {
  if (tls) co_return co_await tls->readSome(sock, p, n, ec);
  co_return co_await sock.async_read_some(asio::buffer(p, n), useEc(ec));
}

asio::awaitable<error_code> SocketOrTls::write(std::string_view d) {
  if (tls) co_return co_await tls->write(sock, d, {});
  error_code ec;
  co_await asio::async_write(sock, asio::buffer(d.data(), d.size()), useEc(ec));
  co_return ec;
}

}  // namespace kvgate::http
