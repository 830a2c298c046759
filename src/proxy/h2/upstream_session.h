// UpstreamSession: one HTTP/2 connection to an engine (rules' `backend_protocol: http2`), shared
// by the requests of one worker: h2c by prior knowledge on plain TCP, h2 by ALPN over TLS
// (security 2). libnghttp2 does the framing, HPACK and the protocol's checks; this file does the
// I/O (one reader, one writer on the worker's event loop) and the streams.
//
// An UpstreamLeg (upstream_leg.h) opens one stream per exchange and reads it as the byte stream
// of an HTTP/1.1 response (bridge.h: the head as text, a body without content-length
// chunk-framed), so everything after the leg (relay, SSE, usage scanning, P/D) is unchanged.
// Streams are independent: a finished stream's bytes can never reach another exchange, and a
// cancelled exchange resets its own stream only (RST_STREAM CANCEL), never the connection.
//
// Capacity: a session takes streams once the engine's first SETTINGS came (its stream limit
// known), up to its SETTINGS_MAX_CONCURRENT_STREAMS and at most 100, counting the claims of legs
// that took it and have not opened their stream yet; the pool (upstream_pool.h) opens another
// session when every one is full, one connect per endpoint at a time. A session that received or
// sent GOAWAY, or whose connection ended, takes no new stream; it lives until its last stream ends.
// Retry (UpstreamLeg's retry_safe): only a stream the engine did not process, by its word
// (RST_STREAM REFUSED_STREAM, or a GOAWAY whose last stream id is below it) or because its HEADERS
// never left, is sent again. A connection that ends under a stream whose HEADERS went out is not
// a retry (the engine may be running it).
//
// Bounds: a stream's unread response bytes <= its flow-control window (128 KiB; the window is
// given back as the leg reads, so a slow client slows only its own stream), at most 6x that as
// chunk-framed text for the leg (1-byte DATA frames); the connection's window is given back on
// receipt (streams never block each other); a response head <= UpstreamLeg::kMaxResponseHead and
// at most UpstreamLeg::kMaxInterim interim (1xx) heads (the stream is reset beyond: 502); the
// writer frames at most 64 KiB ahead of the socket.
// Time: the leg's owner's deadlines (connect, data) abort its stream; a session with no stream is
// closed after --upstream-idle-ms (UpstreamPool::sweep), one whose socket takes no byte for as long
// is closed with its streams.
#pragma once
#include <nghttp2/nghttp2.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "http/asio.h"
#include "http/fd_tls.h"
#include "proxy/h2/bridge.h"

namespace kvgate::proxy {
struct DataPlaneStats;
}

namespace kvgate::proxy::h2 {

class UpstreamSession;

// One exchange's stream, shared by the session (while open) and the leg.
struct UpstreamStream {
  explicit UpstreamStream(asio::io_context& io, std::string_view method, size_t max_head)
      : waiter(io), method(method), head(max_head) {}
  asio::steady_timer waiter;  // the leg's wait (cancelled on every change)
  std::string method;         // the request's (HEAD has no body)
  std::string body;           // the request body (copied: the leg may return before it is sent)
  size_t body_off = 0;
  int32_t id = 0;
  int interim = 0;            // 1xx heads received
  bool sent = false;          // END_STREAM of the request went out
  bool headers_sent = false;  // its HEADERS went out
  bool ended = false;         // closed: the response's end, a reset, or the connection's end
  bool clean = false;         // ended by the engine's END_STREAM with the whole response
  bool unprocessed = false;   // the engine did not process it (REFUSED_STREAM, GOAWAY)
  bool cancelled = false;     // the leg gave up on it, or the gateway reset it (malformed)
  bool malformed = false;     // reset by the gateway: a head too large, or too many 1xx heads
  bool conn_lost = false;     // the connection ended under it
  ResponseHeadText head;      // the HEADERS block being received
  bool chunked = false;       // the body is chunk-framed (no content-length)
  bool final_head = false;    // the final (non-1xx) head was received
  std::string data;           // HTTP/1.1 response bytes not yet read by the leg
  size_t unconsumed = 0;      // DATA bytes read by nobody yet (the stream window given back later)
  void wake() { waiter.cancel(); }
};

class UpstreamSession : public std::enable_shared_from_this<UpstreamSession> {
 public:
  // `sock` connected (and `tls` handshaken with ALPN h2, with its context `ctx`).
  UpstreamSession(asio::io_context& io, tcp::socket sock, std::unique_ptr<http::FdTls> tls,
                  std::shared_ptr<asio::ssl::context> ctx, std::string tls_name,
                  DataPlaneStats& stats);
  ~UpstreamSession();
  void start();  // the reader and the writer
  // A new stream may be opened here: the connection goes on and has room (streams and claims
  // under the engine's SETTINGS_MAX_CONCURRENT_STREAMS and 100).
  bool usable() const;
  // A leg holding the session for a stream it has not opened yet (its place is kept: a burst
  // spreads over connections by the engine's limit); open() takes the claim back, so does
  // unclaim() when the leg gives up first.
  void claim() { ++claims_; }
  void unclaim() {
    if (claims_ > 0) --claims_;
  }
  // The engine's first SETTINGS arrived (its stream limit is known); false: the connection ended.
  // `t` is set to the timer waited on (the leg's abort cancels it).
  asio::awaitable<bool> settled(asio::steady_timer*& t);
  bool closed() const { return closed_; }
  size_t streams() const { return streams_.size(); }
  std::chrono::steady_clock::time_point idleSince() const { return idle_since_; }
  const asio::ssl::context* tlsContext() const { return ctx_.get(); }
  const std::string& tlsName() const { return tls_name_; }
  // Submits the request (`head`: the request path's HTTP/1.1 head text; `body`: copied). Null
  // with `error` set when it cannot be (the session is not usable, or the head not readable).
  // `retryable`: the failure is the session's (closing): another connection may take it.
  std::shared_ptr<UpstreamStream> open(std::string_view head, std::string_view body,
                                       std::string& error, bool& retryable);
  // The leg is done with `s`: a stream not ended yet is reset, CANCEL, or NO_ERROR when its
  // response was read whole (`complete`: its END_STREAM is just not here yet).
  void finish(const std::shared_ptr<UpstreamStream>& s, bool complete = false);
  size_t claims() const { return claims_; }
  bool settledNow() const { return settings_; }
  // The engine answered the connection preface in HTTP/1.1 ("HTTP/1." first): an HTTP/1.1-only
  // engine (the session ended, no protocol error counted).
  bool spokeHttp1() const { return spoke_http1_; }
  // The engine's stream limit (SETTINGS_MAX_CONCURRENT_STREAMS, at most 100); 0: it takes none now.
  uint32_t streamLimit() const;
  // The leg read `n` response bytes of `s`: its window reopens.
  void consumed(UpstreamStream& s, size_t n);
  // Closes the connection now (its streams end: conn_lost); `graceful`: GOAWAY, no new stream,
  // the open ones finish, then the close.
  void close(bool graceful = false);

 private:
  static int onHeader(nghttp2_session*, const nghttp2_frame*, const uint8_t*, size_t,
                      const uint8_t*, size_t, uint8_t, void*);
  static int onDataChunk(nghttp2_session*, uint8_t, int32_t, const uint8_t*, size_t, void*);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame*, void*);
  static int onFrameSend(nghttp2_session*, const nghttp2_frame*, void*);
  static int onFrameNotSend(nghttp2_session*, const nghttp2_frame*, int, void*);
  static int onStreamClose(nghttp2_session*, int32_t, uint32_t, void*);
  static ssize_t readBody(nghttp2_session*, int32_t, uint8_t*, size_t, uint32_t*,
                          nghttp2_data_source*, void*);
  static UpstreamStream* streamOf(nghttp2_session*, int32_t id);
  void endHead(UpstreamStream& s);
  void endStream(UpstreamStream& s);
  void closeNow();
  void wakeWriter();
  asio::awaitable<void> reader();
  asio::awaitable<void> writer();

  asio::io_context& io_;
  tcp::socket sock_;
  std::shared_ptr<asio::ssl::context> ctx_;  // (declared first: outlives tls_)
  std::unique_ptr<http::FdTls> tls_;
  std::string tls_name_;
  DataPlaneStats& stats_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::shared_ptr<UpstreamStream>> streams_;
  std::string out_;
  asio::steady_timer wake_;
  bool writer_waiting_ = false;
  bool closed_ = false;
  bool goaway_ = false;          // the engine's GOAWAY, ours, or a fatal error: no new stream
  bool protocol_error_ = false;  // counted once
  bool fatal_ = false;           // libnghttp2 failed the session: close once the writer is done
  bool settings_ = false;        // the engine's SETTINGS arrived
  bool spoke_http1_ = false;     // its first bytes were an HTTP/1.1 answer
  bool received_ = false;        // a byte of the engine's arrived
  asio::steady_timer settled_;   // settled()'s wait
  size_t claims_ = 0;
  bool write_pending_ = false;
  std::chrono::steady_clock::time_point write_started_;
  std::chrono::steady_clock::time_point idle_since_;

 public:
  // The socket takes no byte since (for the pool's sweep).
  bool writeStalledSince(std::chrono::steady_clock::time_point t) const {
    return write_pending_ && write_started_ < t;
  }
};

}  // namespace kvgate::proxy::h2
