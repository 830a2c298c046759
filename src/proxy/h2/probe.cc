// An HTTP/2 health probe exchange (probe.h): libnghttp2's client session over the probe's own
// connection, fed and drained by this coroutine.
#include "proxy/h2/probe.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <string_view>

#include "proxy/h2/frames.h"

namespace kvgate::proxy::h2 {
namespace {

constexpr size_t kMaxProbeRead = 64 * 1024;

struct State {
  int pending = 0;  // the :status of stream 1's head being read (committed once it is whole)
  int status = 0;   // the final :status of stream 1 (a head libnghttp2 accepted whole)
  bool done = false;
};

int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
             const uint8_t* value, size_t valuelen, uint8_t, void* user) {
  auto* st = static_cast<State*>(user);
  if (frame->hd.type == NGHTTP2_HEADERS && frame->hd.stream_id == 1 &&
      std::string_view(reinterpret_cast<const char*>(name), namelen) == ":status") {
    int v = 0;
    const char* p = reinterpret_cast<const char*>(value);
    if (std::from_chars(p, p + valuelen, v).ec == std::errc() && valuelen == 3) st->pending = v;
  }
  return 0;
}

int onFrameRecv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto* st = static_cast<State*>(user);
  // A whole head of stream 1 (a head libnghttp2 refused resets the stream instead: no status);
  // a 1xx head is interim, the final one follows.
  if (frame->hd.type == NGHTTP2_HEADERS && frame->hd.stream_id == 1 && st->pending >= 200) {
    st->status = st->pending;
    st->done = true;
  }
  return 0;
}

int onStreamClose(nghttp2_session*, int32_t id, uint32_t, void* user) {
  if (id == 1) static_cast<State*>(user)->done = true;
  return 0;
}

}  // namespace

asio::awaitable<ProbeAnswer> probeStatus(http::SocketOrTls& conn, const std::string& method,
                                         const std::string& path, const std::string& authority,
                                         bool tls) {
  ProbeAnswer answer;
  State st;
  nghttp2_session_callbacks* cb = nullptr;
  if (nghttp2_session_callbacks_new(&cb) != 0) co_return answer;
  nghttp2_session_callbacks_set_on_header_callback(cb, onHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, onFrameRecv);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, onStreamClose);
  nghttp2_session* raw = nullptr;
  const int rv = nghttp2_session_client_new(&raw, cb, &st);
  nghttp2_session_callbacks_del(cb);
  if (rv != 0) co_return answer;
  std::unique_ptr<nghttp2_session, decltype(&nghttp2_session_del)> session(raw,
                                                                          nghttp2_session_del);
  const nghttp2_settings_entry no_push[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0}};
  nghttp2_submit_settings(raw, NGHTTP2_FLAG_NONE, no_push, std::size(no_push));
  const nghttp2_nv nva[] = {nv(":method", method), nv(":scheme", tls ? "https" : "http"),
                            nv(":authority", authority), nv(":path", path),
                            nv("user-agent", "kvgate-probe")};
  if (nghttp2_submit_request(raw, nullptr, nva, std::size(nva), nullptr, nullptr) < 0)
    co_return answer;
  std::string out;
  char buf[4096];
  size_t total = 0;
  for (;;) {
    out.clear();
    const uint8_t* data = nullptr;
    for (ssize_t n; (n = nghttp2_session_mem_send(raw, &data)) > 0;)
      out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    if (!out.empty() && co_await conn.write(out)) break;
    if (st.done) break;
    // (the session ended: a GOAWAY sent or received, nothing more to wait for)
    if (!nghttp2_session_want_read(raw) && !nghttp2_session_want_write(raw)) break;
    error_code ec;
    const size_t n = co_await conn.readSome(buf, sizeof buf, ec);
    if (ec || n == 0) break;
    // (a server's first frame is its SETTINGS, at most 16 KiB long: its first byte is 0)
    if (total == 0 && std::string_view("HTTP/1.").starts_with(
                          std::string_view(buf, std::min<size_t>(n, 7)))) {
      answer.spoke_http1 = true;
      break;
    }
    total += n;
    if (total > kMaxProbeRead) break;
    if (nghttp2_session_mem_recv(raw, reinterpret_cast<const uint8_t*>(buf), n) < 0) break;
  }
  answer.status = st.status;
  co_return answer;
}

}  // namespace kvgate::proxy::h2
