// `kvgate bench sse --h2 K`: the streams over HTTP/2, K per connection (libnghttp2's client
// session fed and drained by one coroutine per connection). Each stream POSTs /v1/completions
// with stream:true; its DATA is scanned for the simulator's stamps as the HTTP/1.1 streams' bodies
// are (sse_bench.h). A connection starts at its first stream's place in the ramp and opens all
// its streams at once.
#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "bench/sse_bench.h"
#include "proxy/h2/frames.h"

namespace kvgate::bench {
namespace {

struct H2Stream {
  std::string body;  // the request body (sent by the data provider)
  size_t sent = 0;
  std::string buf;  // response bytes not scanned yet
  int status = 0;
  bool done = false;  // saw data: [DONE]
  int64_t stamps = 0;
};

struct H2Conn {
  SseStats& st;
  std::unordered_map<int32_t, H2Stream> streams;
  size_t open = 0;
};

int onHeader(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
             const uint8_t* value, size_t valuelen, uint8_t, void* user) {
  auto* c = static_cast<H2Conn*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS ||
      std::string_view(reinterpret_cast<const char*>(name), namelen) != ":status")
    return 0;
  auto it = c->streams.find(frame->hd.stream_id);
  if (it != c->streams.end()) {
    const char* p = reinterpret_cast<const char*>(value);
    std::from_chars(p, p + valuelen, it->second.status);
  }
  return 0;
}

int onData(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len, void* user) {
  auto* c = static_cast<H2Conn*>(user);
  auto it = c->streams.find(id);
  if (it == c->streams.end()) return 0;
  H2Stream& s = it->second;
  const int64_t now = nowUs();
  s.buf.append(reinterpret_cast<const char*>(data), len);
  if (s.buf.find("data: [DONE]") != std::string::npos) s.done = true;
  s.stamps += scanStamps(s.buf, now, c->st);
  return 0;
}

int onClose(nghttp2_session*, int32_t id, uint32_t, void* user) {
  auto* c = static_cast<H2Conn*>(user);
  auto it = c->streams.find(id);
  if (it == c->streams.end()) return 0;
  c->st.ended(it->second.done, it->second.status, it->second.stamps);
  c->streams.erase(it);
  --c->open;
  return 0;
}

ssize_t readBody(nghttp2_session* session, int32_t id, uint8_t* out, size_t len, uint32_t* flags,
                 nghttp2_data_source*, void* user) {
  auto* c = static_cast<H2Conn*>(user);
  auto it = c->streams.find(id);
  if (it == c->streams.end()) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return 0;
  }
  H2Stream& s = it->second;
  const size_t n = std::min(len, s.body.size() - s.sent);
  std::copy_n(s.body.data() + s.sent, n, out);
  s.sent += n;
  if (s.sent == s.body.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
  (void)session;
  return static_cast<ssize_t>(n);
}

}  // namespace

asio::awaitable<void> h2Connection(const SseOptions& o, int first, int count, SseStats& st) {
  tcp::socket sock(co_await asio::this_coro::executor);
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;
  int64_t setup_from = 0;
  error_code ec = co_await openConnection(o, first, sock, tls, setup_from, "\x02h2");
  if (ec) {
    st.errors += count;
    st.connect_failed += count;
    co_return;
  }
  H2Conn c{st, {}, 0};
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, onHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, onData);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, onClose);
  nghttp2_session* raw = nullptr;
  const int made = nghttp2_session_client_new(&raw, cb, &c);
  nghttp2_session_callbacks_del(cb);
  if (made != 0) {
    st.errors += count;
    st.connect_failed += count;
    co_return;
  }
  std::unique_ptr<nghttp2_session, decltype(&nghttp2_session_del)> session(raw,
                                                                          nghttp2_session_del);
  // (a window as large as the streams need: the relay is measured, not flow control)
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
                                             {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000}};
  nghttp2_submit_settings(raw, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(raw, NGHTTP2_FLAG_NONE, 0, 64 << 20);
  const std::string authority = o.host + ":" + std::to_string(o.port);
  for (int i = first; i < first + count; ++i) {
    H2Stream s;
    s.body = "{\"model\":\"" + o.model + "\",\"prompt\":\"stream " + std::to_string(i) +
             "\",\"max_tokens\":" + std::to_string(o.events) + ",\"stream\":true}";
    const std::string len = std::to_string(s.body.size());
    const nghttp2_nv nva[] = {proxy::h2::nv(":method", "POST"),
                              proxy::h2::nv(":scheme", tls ? "https" : "http"),
                              proxy::h2::nv(":authority", authority),
                              proxy::h2::nv(":path", "/v1/completions"),
                              proxy::h2::nv("content-type", "application/json"),
                              proxy::h2::nv("content-length", len)};
    nghttp2_data_provider dp{};
    dp.read_callback = readBody;
    const int32_t id = nghttp2_submit_request(raw, nullptr, nva, std::size(nva), &dp, nullptr);
    if (id < 0) {
      ++st.errors;
      ++st.connect_failed;
      continue;
    }
    c.streams.emplace(id, std::move(s));
    ++c.open;
  }
  std::string out;
  char buf[16384];
  bool setup_noted = false;
  while (c.open > 0) {
    out.clear();
    const uint8_t* data = nullptr;
    for (ssize_t n; (n = nghttp2_session_mem_send(raw, &data)) > 0;)
      out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
    if (!out.empty()) {
      if (tls) co_await asio::async_write(*tls, asio::buffer(out), useEc(ec));
      else co_await asio::async_write(sock, asio::buffer(out), useEc(ec));
      if (ec) break;
      if (!setup_noted) {
        for (int i = 0; i < count; ++i) st.setup_us.push_back(nowUs() - setup_from);
        setup_noted = true;
      }
    }
    const size_t n = tls ? co_await tls->async_read_some(asio::buffer(buf), useEc(ec))
                         : co_await sock.async_read_some(asio::buffer(buf), useEc(ec));
    if (ec || n == 0) break;
    if (nghttp2_session_mem_recv(raw, reinterpret_cast<const uint8_t*>(buf), n) < 0) break;
  }
  // Streams the connection took with it: ended without [DONE].
  for (auto& [id, s] : c.streams) st.ended(s.done, s.status, s.stamps);
}

}  // namespace kvgate::bench
