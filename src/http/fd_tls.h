// FdTls: TLS over a non-blocking TCP socket (either side), with OpenSSL reading and writing
// the descriptor itself (SSL_set_fd; no memory BIOs). OpenSSL reads ahead (one read per flight,
// not two per record); what it read ahead stays in its own buffer, which pending()
// (SSL_has_pending: decrypted or not, whole records or not) counts. Nothing is buffered outside
// OpenSSL and the kernel, so "nothing pending" (pending() false and a MSG_PEEK finding no byte)
// is exact: a kept-alive upstream connection is checked before reuse as a plain one is, and bytes
// an engine sent after its response can never reach the next request (upstream pool rule). Asio's
// ssl::stream cannot give that guarantee: records it has read into its own buffers are visible to
// neither check. Reads wait on the descriptor's edge-triggered registration (http/readiness.h:
// no syscall for the wait; without that build, a one-byte MSG_PEEK receive), writes with a
// writability wait (the owner's deadline closes the socket). It costs no buffer of its own: an
// idle connection holds OpenSSL's state only (with SSL_MODE_RELEASE_BUFFERS on the context),
// where an Asio ssl::stream keeps four 17 KiB buffers. One read and one write may be pending at
// once (a write waiting for room while the client watcher reads), as OpenSSL allows on one
// thread.
//
// The SSL object holds the descriptor number, not the socket: the socket may move (into the
// pool) with its descriptor; every call takes the socket and refuses to touch a closed one (its
// number may already belong to another connection).
//
// SSL_MODE_AUTO_RETRY is off: one record per call, so a peer streaming records that carry no
// data (KeyUpdate) cannot keep a worker inside SSL_read. Such a call returns WANT_READ without
// its read meeting EAGAIN, so a wait marks the socket drained only when errno says the read did
// (else the wait completes at once and OpenSSL reads again): no byte or close the kernel holds is
// missed. OpenSSL writes with write(2): SIGPIPE must be ignored (serve does).
#pragma once
#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <string_view>

#include "http/asio.h"
#include "http/tls.h"

namespace kvgate::http {

class FdTls {
 public:
  enum class Want : uint8_t { kNothing, kRead, kWrite };  // what a call that got no bytes awaits
  FdTls(tcp::socket& sock, SSL_CTX* ctx);  // (SSL_new holds its own reference to ctx)
  ~FdTls();
  FdTls(const FdTls&) = delete;
  FdTls& operator=(const FdTls&) = delete;
  SSL* native() { return ssl_; }
  bool ok() const { return ssl_ != nullptr; }
  // Bytes OpenSSL holds that the caller has not read (decrypted or not).
  bool pending() const { return ssl_ && SSL_has_pending(ssl_) == 1; }
  // A write is waiting for room (a record may be half-sent). The client watcher does not read
  // then (it only looks for a close). A reader may: OpenSSL 3 defers a KeyUpdate answer and
  // queues an alert while a write is pending, so HTTP/2's reader and writer run side by side
  // (renegotiation, which could make a write wait on a read, is off: tls.cc).
  bool writing() const { return writing_; }
  asio::awaitable<error_code> handshake(tcp::socket& sock, bool server = false);
  // Sends close_notify (without waiting for the peer's: the TCP close follows).
  asio::awaitable<error_code> shutdown(tcp::socket& sock);
  // Plaintext available without waiting: bytes; or 0 with `want` set (wait until readable or
  // writable) or `ec` (EOF, close_notify or an error).
  size_t readNow(tcp::socket& sock, char* p, size_t n, error_code& ec, Want& want);
  // Up to n bytes of plaintext; 0 with ec set on EOF (close_notify or TCP close) or error.
  asio::awaitable<size_t> readSome(tcp::socket& sock, char* p, size_t n, error_code& ec);
  // Both parts, in one record when they fit in one.
  asio::awaitable<error_code> write(tcp::socket& sock, std::string_view a, std::string_view b);

 private:
  // `read_last`: the call was a read or a handshake step whose read of the socket met EAGAIN
  // (errno right after the call); otherwise - a write or a shutdown that wants a read, or a read
  // that stopped after a post-handshake message - the wait does not mark the socket drained.
  asio::awaitable<error_code> waitFor(tcp::socket& sock, int ssl_result, bool read_last);
  // `drained`: OpenSSL's own read of the socket has just met EAGAIN (a WANT_READ from a read or
  // a handshake step).
  asio::awaitable<error_code> waitFor(tcp::socket& sock, Want want, bool drained);
  error_code errorOf(int ssl_error) const;
  asio::awaitable<error_code> writeAll(tcp::socket& sock, std::string_view d);
  SSL* ssl_ = nullptr;
  bool writing_ = false;
  bool read_met_eagain_ = false;  // the last read or handshake call's read of the socket did
};

// The client side, on a connected socket (made non-blocking here): a handshake with `files`'
// current context to `name` (SNI, and the name checked when the context verifies). On success
// `ctx` and `out` hold the connection's context and TLS; the owner's deadline bounds it. `alpn`:
// the protocols offered, in ALPN's wire form ("\x02h2"); empty: none.
asio::awaitable<error_code> clientHandshake(tcp::socket& sock, const TlsFiles& files,
                                            const std::string& name,
                                            std::shared_ptr<asio::ssl::context>& ctx,
                                            std::unique_ptr<FdTls>& out,
                                            std::string_view alpn = {});

// A client exchange's byte stream: the socket, or TLS over it (gateway-made HTTP calls: health
// probes, engine scrapes, TensorRT-LLM drains).
struct SocketOrTls {
  tcp::socket& sock;
  std::unique_ptr<FdTls> tls;
  std::shared_ptr<asio::ssl::context> ctx;  // (the TLS context, while the exchange runs)
  asio::awaitable<size_t> readSome(char* p, size_t n, error_code& ec);
  asio::awaitable<error_code> write(std::string_view d);
};

}  // namespace kvgate::http
