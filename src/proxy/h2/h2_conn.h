// H2Conn: one HTTP/2 client connection of the mode-4 fullproxy: h2c by prior knowledge, or by
// `Upgrade: h2c` on a request without a body (its stream 1 is that request; RFC 7540 §3.2), or h2
// over TLS when ALPN chose it (rules' alpn_protocols; http/fd_tls.h full duplex).
//
// libnghttp2 does the framing, HPACK and the protocol's checks; this file does the I/O (one
// reader, one writer on the worker's event loop) and the streams. Each request stream, once its
// END_STREAM arrived, is served by its own Exchange (proxy/exchange.h: the same dispatch,
// filters, routing, P/D, relay and SSE as an HTTP/1.1 request; the stream is its ClientSide;
// bridge.h says how the request is read), so streams run side by side and one stream's cancel
// (RST_STREAM) aborts only its own engine request.
//
// Bounds (a slow or hostile peer cannot push past them):
//   streams        SETTINGS_MAX_CONCURRENT_STREAMS = --h2-max-streams (default 100); a stream
//                  opened beyond it, or while that many request paths still run (a client that
//                  resets streams at once), is refused (RST_STREAM REFUSED_STREAM), counted.
//   request bytes  a stream's head as HTTP/1.1 text <= --max-head-bytes (431), its body <=
//                  --max-body-bytes (413); the bytes a connection holds for unfinished requests
//                  <= --max-body-bytes: past it the flow-control windows are not reopened (the
//                  client waits) except for the oldest request still arriving, so one always
//                  completes (at most twice --max-body-bytes held); stream window 256 KiB,
//                  connection window 1 MiB. A stream's bytes count until its request path
//                  frees them (a stream's request is freed once it is sent).
//   response bytes a stream holds at most 64 KiB not yet framed; its request path waits beyond
//                  it. The writer frames at most 64 KiB ahead of the socket.
//   time           a stream's request must be complete within --header-timeout (408, reset);
//                  a stream whose answer the client takes nothing of for --idle-timeout-ms is
//                  reset, a socket that takes no byte for as long is closed; a connection with
//                  no stream for --idle-timeout-ms gets GOAWAY and is closed.
//   control frames libnghttp2's own limits (SETTINGS, PING and RST floods end the connection;
//                  a header block of too many CONTINUATION frames too, CVE-2024-28182's fix in
//                  Debian's 1.52); the HPACK table the client may fill here 4 KiB (SETTINGS).
// Drain (SIGTERM, listener removed): GOAWAY, running streams finish, then the connection closes.
#pragma once
#include <nghttp2/nghttp2.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "http/asio.h"
#include "http/fd_tls.h"

namespace kvgate::proxy {

class Worker;
struct Listener;

// The HTTP/2 client connection preface (RFC 9113 §3.4).
inline constexpr std::string_view kH2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

class H2Conn : public std::enable_shared_from_this<H2Conn> {
 public:
  // `tls` (and its context): the connection's TLS, once ALPN chose h2; null: h2c.
  H2Conn(Worker& w, std::shared_ptr<Listener> l, tcp::socket s, tcp::endpoint peer,
         std::unique_ptr<http::FdTls> tls = nullptr,
         std::shared_ptr<asio::ssl::context> tls_ctx = nullptr);
  ~H2Conn();
  // An HTTP/1.1 request that asked to upgrade (101 sent): it becomes stream 1.
  struct Upgrade {
    std::string settings;  // the HTTP2-Settings payload, decoded
    std::string request;   // the request's HTTP/1.1 head text (it has no body)
    std::string method;
  };
  // Serves the connection until it closes; `preread`: bytes already read from it (the preface).
  asio::awaitable<void> run(std::string preread, std::unique_ptr<Upgrade> upgrade = nullptr);
  // Shutdown: GOAWAY; the streams running finish, then the connection closes.
  void drain();

 private:
  struct Stream;
  friend struct Stream;
  // libnghttp2 callbacks (user_data: the H2Conn)
  static int onBeginHeaders(nghttp2_session*, const nghttp2_frame*, void*);
  static int onHeader(nghttp2_session*, const nghttp2_frame*, const uint8_t*, size_t,
                      const uint8_t*, size_t, uint8_t, void*);
  static int onDataChunk(nghttp2_session*, uint8_t, int32_t, const uint8_t*, size_t, void*);
  static int onFrameRecv(nghttp2_session*, const nghttp2_frame*, void*);
  static int onFrameSend(nghttp2_session*, const nghttp2_frame*, void*);
  static Stream* endedBy(nghttp2_session*, const nghttp2_frame*);
  static int onStreamClose(nghttp2_session*, int32_t, uint32_t, void*);
  static ssize_t readData(nghttp2_session*, int32_t, uint8_t*, size_t, uint32_t*,
                          nghttp2_data_source*, void*);

  asio::awaitable<void> writer();
  asio::awaitable<void> ticker();
  asio::awaitable<void> serveStream(std::shared_ptr<H2Conn> self, Stream* s, std::string bytes);
  void startStream(Stream& s);
  void launch(Stream& s, std::string bytes);  // its request path, on `bytes`
  bool startUpgraded(Upgrade& up);
  // An answer of the gateway's own on a stream with no request path (400, 408, 413, 431, 501).
  void answer(Stream& s, int status, std::string_view code, std::string_view message,
              bool request_ended = false);
  void wakeWriter();
  void releaseBody(Stream& s);
  void consumePending();
  void giveBackWindow(Stream& s);
  int32_t oldestArriving() const;  // the stream id of the oldest request still arriving (0: none)
  void eraseIfDone(Stream& s);
  void closeNow();
  // Hands bytes read from the client to libnghttp2 (dropped once it reads no more); a fatal
  // error ends the session with our GOAWAY.
  void feed(const char* p, size_t n);
  void resetRunners();
  bool done() const;

  Worker& w_;
  std::shared_ptr<Listener> l_;
  tcp::socket sock_;
  tcp::endpoint peer_;
  std::shared_ptr<asio::ssl::context> tls_ctx_;  // (declared first: outlives tls_)
  std::unique_ptr<http::FdTls> tls_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::unique_ptr<Stream>> streams_;
  size_t running_ = 0;     // streams whose request path runs
  size_t body_bytes_ = 0;  // request bytes held for unfinished requests
  std::string out_;        // frames being written
  asio::steady_timer wake_;             // the writer's wait for frames
  bool writer_waiting_ = false;
  bool closed_ = false;
  bool draining_ = false;
  bool fatal_ = false;    // libnghttp2 ended the session (a protocol error or a flood)
  bool closing_ = false;  // our side shut (the close's last step): waiting for the client's
  std::chrono::steady_clock::time_point closing_since_;
  bool write_pending_ = false;  // a socket write waits for room since write_started_
  std::chrono::steady_clock::time_point write_started_;
  error_code ec_ignored_;
  std::chrono::steady_clock::time_point idle_since_;
};

}  // namespace kvgate::proxy
