// ClientConn: one HTTP/1.x client connection of the mode-4 fullproxy (internal to src/proxy): it
// frames bytes and serves the requests they carry one after another through its Exchange
// (exchange.h), to which it is the client side (client_side.h): head text, chunk framing,
// interim answers, keep-alive, the client-disconnect watcher and the sockmap splice. A connection
// that turns out to speak HTTP/2 (prior knowledge, `Upgrade: h2c`, ALPN "h2") hands its socket
// to an H2Conn (h2/h2_conn.h), which makes an Exchange per stream.
//
// Files: connection.cc (the request loop: head, body, drain; the switch to HTTP/2),
// connection_io.cc (client reads and writes, TLS, the watcher).
#pragma once
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "http/fd_tls.h"
#include "http/parser.h"
#include "proxy/buffer.h"
#include "proxy/client_side.h"
#include "proxy/exchange.h"
#include "proxy/worker.h"
#include "sockmap/sockmap_relay.h"

namespace kvgate::http {
class TlsFiles;
}

namespace kvgate::proxy {

class H2Conn;
// Client bytes the watcher may hold while a response is relayed (a pipelined next request);
// beyond it the watcher stops reading and TCP pushes back on the client.
constexpr size_t kMaxPipelinedBytes = 64 * 1024;

class ClientConn final : public std::enable_shared_from_this<ClientConn>, private ClientSide {
 public:
  ClientConn(Worker& w, std::shared_ptr<Listener> l, tcp::socket s);
  void setPeer(const tcp::endpoint& peer) { peer_ = peer; }  // before run()
  ~ClientConn();

  asio::awaitable<void> run();
  // Shutdown (worker thread): a connection idle between requests closes now; one with a request
  // in flight closes after answering it.
  void onDrain();

 private:
  using Phase = Exchange::Phase;
  // connection.cc
  asio::awaitable<void> serve();
  // One request whose head (`hn` bytes) is in in_: its framing facts, before ex_->serve().
  void beginRequest(Request& req, int hn);
  // >0 head bytes, 0 closed, <0 answered, kH2PrefaceSeen: HTTP/2's preface (a plain
  // connection's first bytes, with --http2 on).
  asio::awaitable<int> readHead(http::RequestHead& head);
  static constexpr int kH2PrefaceSeen = -2;
  asio::awaitable<void> serveH2();
  // `Upgrade: h2c` where it is safe (RFC 7540 §3.2): the first request of a plain connection,
  // without a body, with one valid HTTP2-Settings named in Connection; `settings` decoded. Any
  // other request asking for it is served as HTTP/1.1 (an upgrade is the server's option).
  bool h2UpgradeAsked(const http::RequestHead& head, std::string& settings) const;
  asio::awaitable<void> serveH2Upgrade(const http::RequestHead& head, int hn, std::string settings);
  asio::awaitable<bool> readChunkedBody(Request& req);
  void reparseHeadIfMoved(Request& req, const char* head_base);

  // connection_io.cc
  asio::awaitable<bool> readMore(Buffer& b);
  // TLS (a listener with security 1 rules): the handshake; then every client read and write goes
  // through tls_. False: the handshake failed (counted, the connection closes).
  asio::awaitable<bool> acceptTls(const http::TlsFiles& files,
                                  const std::shared_ptr<asio::ssl::context>& ctx);
  void startWatch();
  void armWatch(uint64_t gen);

  // ClientSide (client_side.h), for ex_.
  bool multiplexed() const override { return false; }
  bool payloadOnly() const override { return client_minor_ == 0; }
  asio::awaitable<bool> write(std::string_view a, std::string_view b) override;
  bool writeNow(std::string_view a, std::string_view b, size_t& written, error_code& ec) override;
  asio::awaitable<error_code> writeRest(std::string_view a, std::string_view b,
                                        size_t written) override;
  asio::awaitable<bool> readBody(Request& req) override;  // (connection.cc)
  bool requestReleasable() const override { return in_.size() == request_bytes_; }
  void releaseRequest() override {
    in_.clear();
    in_.shrinkIfEmpty(0);
  }
  bool keepAlive() const override {
    return client_keep_alive_ && !w_.draining && !l_->closed.load();
  }
  void closeAfter() override { client_keep_alive_ = false; }
  void setIdleTimeout(std::chrono::milliseconds t) override { idle_timeout_ = t; }
  void close() override {  // (close alone: a shutdown first would only add a syscall)
    error_code ec;
    client_.close(ec);
  }
  void requestTimedOut() override;
  void watch() override;
  void unwatch() override;
  int plainFd() override { return tls_ ? -1 : client_.native_handle(); }
  sockmap::Registration* sockmapTarget() override { return tls_ ? nullptr : &client_sockmap_; }

  Worker& w_;
  std::shared_ptr<Listener> l_;
  tcp::socket client_;
  std::shared_ptr<H2Conn> h2_;  // an HTTP/2 connection this one turned into (prior knowledge)
  // (the context, and the client-certificate check its ex data points to, live while tls_ does)
  std::shared_ptr<asio::ssl::context> tls_ctx_;
  std::unique_ptr<http::FdTls> tls_;      // OpenSSL on client_'s descriptor (http/fd_tls.h)
  sockmap::Registration client_sockmap_;  // the client as a sockmap relay target (first splice)
  Buffer in_;                             // client bytes
  bool client_keep_alive_ = true;
  int client_minor_ = 1;
  std::chrono::milliseconds idle_timeout_{0};
  // Client-disconnect watcher state.
  bool watching_ = false;
  bool watch_running_ = false;
  bool client_eof_ = false;  // a TLS read of the client met EOF or an error
  uint64_t watch_gen_ = 0;
  tcp::endpoint peer_;        // the client's address, as accept gave it (setPeer)
  std::string pipelined_;     // client bytes the watcher read during a response (bounded)
  size_t request_bytes_ = 0;  // bytes of the current request in in_ (head + raw body)
  std::string dechunked_;     // a chunked request's payload
  // The requests, one after another (declared last: it refers to this connection as its client
  // side, and goes first).
  std::shared_ptr<Exchange> ex_;
};

}  // namespace kvgate::proxy
