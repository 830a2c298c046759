// UpstreamLeg: one exchange with one upstream endpoint.
//
// takePooled() takes a pooled keep-alive connection to the endpoint, else connect() opens one;
// send() writes the request; readHead() reads the response head, reporting each interim 1xx (other
// than 101) separately so the caller can relay it and read on; readBody() brings more response
// bytes into buf(); release() ends the exchange: the connection goes back to the worker's pool
// only when the caller says the response was read completely and nothing else is buffered,
// otherwise it is closed (never pool a connection with a response outstanding).
//
// Every failure comes back as a Result whose `retry_safe` says whether the request may be sent
// again (nothing reached the engine: a connect failure, or a reused connection that failed or
// closed before any response byte). Timeouts are the owner's: its deadline calls abort(true).
// A single-pool request runs one leg; a P/D request runs two (prefill, decode).
//
// TLS to the engine (rules with security 2): both calls take the rule's BackendTls; connect()
// then runs the TLS handshake (SNI and the name check use the endpoint's domainName, else its
// IP) within the same connect deadline, and every read and write goes through OpenSSL. Pooled
// connections are reused only with the same context.
//
// HTTP/2 to the engine (`http2`: rules' backend_protocol http2): the exchange is one stream of a
// session the worker's requests share (h2/upstream_session.h; over TLS the engine must choose h2
// by ALPN); its response is read as the same HTTP/1.1 byte stream (bridge.h), so readHead(),
// readBody() and buf() are unchanged for the caller. abort() and release() reset the stream only;
// retry_safe also covers a stream the engine did not process (REFUSED_STREAM, GOAWAY).
#pragma once
#include <string>
#include <string_view>

#include "endpoints/endpoint.h"
#include "http/tls.h"
#include "http/asio.h"
#include "http/parser.h"
#include "proxy/buffer.h"
#include "proxy/upstream_pool.h"

namespace kvgate::proxy::h2 {
class UpstreamSession;
struct UpstreamStream;
}  // namespace kvgate::proxy::h2

namespace kvgate::proxy {

// The leg's owner learns when an upstream read has to wait (the client watcher starts then).
class LegObserver {
 public:
  virtual void onUpstreamWait() = 0;

 protected:
  ~LegObserver() = default;
};

class UpstreamLeg {
 public:
  enum class Outcome : uint8_t {
    kOk,
    kConnectFailed,  // no connection (retry elsewhere is safe)
    kSendFailed,     // the write failed
    kTimeout,        // the owner's deadline expired during this step
    kBadResponse,    // malformed response head, or a 101 nobody asked for
    kClosed,         // the upstream closed (or errored) before a complete head
  };
  struct Result {
    Outcome outcome = Outcome::kOk;
    bool retry_safe = false;
    bool interim = false;  // readHead: a 1xx (not 101); relay it, consumeHead(), read again
    std::string error;     // what failed, for logs and the client's error body
    int starved = 0;       // kConnectFailed for want of a descriptor (1) or memory (2): ours
    bool ok() const { return outcome == Outcome::kOk; }
  };
  static constexpr size_t kMaxResponseHead = 64 * 1024;
  static constexpr int kMaxInterim = 16;  // more 1xx than this before a final answer: 502

  UpstreamLeg(asio::io_context& io, UpstreamPool& pool, LegObserver& observer)
      : io_(io), pool_(pool), observer_(observer), conn_(io) {}
  ~UpstreamLeg();

  // Starts an exchange with endpoint `id` on a pooled keep-alive connection; false when the pool
  // has none (then connect()). `tls`: the rule's TLS to its engines (null: plain); `tls_name` as
  // for connect().
  bool takePooled(endpoints::EndpointId id, const http::BackendTls* tls = nullptr,
                  std::string_view tls_name = {}, BackendProtocol proto = BackendProtocol::kHttp1);
  // Starts an exchange with endpoint `id` on a new connection to `addr` (the owner's deadline
  // bounds the connect and the TLS handshake). `tls_name`: the name the engine's certificate must
  // carry (its domainName or IP).
  asio::awaitable<Result> connect(endpoints::EndpointId id, const tcp::endpoint& addr,
                                  std::string_view label, const http::BackendTls* tls = nullptr,
                                  std::string_view tls_name = {},
                                  BackendProtocol proto = BackendProtocol::kHttp1);
  // This exchange runs over HTTP/2 (a stream of a shared connection).
  bool http2() const { return http2_; }
  asio::awaitable<Result> send(std::string_view head, std::string_view body);
  asio::awaitable<Result> readHead(std::string_view method, http::ResponseHead& rh);
  void consumeHead(const http::ResponseHead& rh) { buf_.consume(rh.head_bytes); }
  // More response bytes into buf(); false on EOF, error or abort.
  asio::awaitable<bool> readBody() { return readSome(); }
  Buffer& buf() { return buf_; }
  bool bufEmpty() const { return buf_.empty(); }
  // An event stream: its reads keep 4 KiB of room (events are small) instead of doubling when a
  // burst fills a read, and an empty buffer is freed before each wait for the next event, so an
  // open stream holds no read buffer between events (nginx keeps its 4 KiB proxy buffer). Costs
  // a malloc and a free per wait (plain TCP only: a TLS read waits inside OpenSSL's call).
  void keepReadRoomSmall();
  // Ends the exchange; `complete`: the whole response was read and the upstream allows reuse.
  void release(bool complete);
  // Closes the connection (deadline, client gone); a pending operation completes with an error.
  void abort(bool timeout) {
    timed_out_ |= timeout;
    aborted_ = true;
    close();
  }
  bool timedOut() const { return timed_out_; }
  // Closes the connection because its owner gave up on the exchange (the client left, another
  // leg failed): not the endpoint's failure, so nothing is settled against it.
  void abandon() {
    abandoned_ = true;
    aborted_ = true;
    close();
  }
  bool abandoned() const { return abandoned_; }
  // The last readBody() that returned false met a clean end of stream (TCP EOF; TLS close_notify).
  bool cleanEof() const { return clean_eof_; }
  // The plain TCP connection's descriptor for the sockmap relay (relay_sockmap.cc), -1 when the
  // exchange is not plain HTTP/1.1 over TCP.
  int plainFd() {
    return !http2_ && !conn_.tls && conn_.isOpen() ? conn_.sock.native_handle() : -1;
  }

 private:
  asio::awaitable<bool> readSome();
  void noteRead(size_t n, size_t room);
  size_t readRoom() const;
  void begin(endpoints::EndpointId id);
  void close();
  asio::awaitable<bool> readSomeH2();
  asio::awaitable<Result> sendH2(std::string_view head, std::string_view body);
  asio::awaitable<bool> awaitH2Connect(endpoints::EndpointId id, const asio::ssl::context* ctx,
                                       std::string_view tls_name);
  void resetH2(bool complete = false);
  asio::awaitable<Result> handshake(const http::BackendTls& tls, std::string_view name,
                                    std::string_view label, BackendProtocol proto);
  asio::awaitable<Result> openSocket(const tcp::endpoint& addr, std::string_view label);
  asio::io_context& io_;
  UpstreamPool& pool_;
  LegObserver& observer_;
  UpstreamConn conn_;
  Buffer buf_;
  endpoints::EndpointId id_ = 0;
  bool reused_ = false;
  bool timed_out_ = false;
  bool abandoned_ = false;
  bool aborted_ = false;     // abort() or abandon() since begin(): nothing more is started
  size_t read_room_ = 4096;  // room asked for by the next read (grows for large bodies)
  int interim_count_ = 0;    // 1xx responses seen in this exchange
  bool clean_eof_ = false;   // the last failed read was a clean end of stream
  bool grow_room_ = true;    // reads that fill their room double it (large bodies)
  // HTTP/2 (backend_protocol http2): the session and this exchange's stream.
  bool http2_ = false;
  std::shared_ptr<h2::UpstreamSession> h2_session_;
  std::shared_ptr<h2::UpstreamStream> h2_stream_;
  asio::steady_timer* h2_wait_ = nullptr;  // waiting for another leg's connect (abort wakes it)
};

}  // namespace kvgate::proxy
