// One HTTP/2 connection to an engine (upstream_session.h says the design and the bounds).
#include "proxy/h2/upstream_session.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "proxy/h2/frames.h"
#include "proxy/rule_stats.h"
#include "proxy/upstream_leg.h"

namespace kvgate::proxy::h2 {

namespace {
constexpr int32_t kStreamWindow = 128 * 1024;    // response bytes a stream may hold unread
constexpr int32_t kConnWindow = 1024 * 1024;     // (given back on receipt)
constexpr uint32_t kMaxStreamsPerSession = 100;  // and at most the engine's SETTINGS
constexpr size_t kWriteAhead = 64 * 1024;
constexpr size_t kReadBytes = 16 * 1024;

void appendHex(std::string& out, size_t n) {
  char b[20];
  int i = 20;
  do {
    b[--i] = "0123456789abcdef"[n & 15];
    n >>= 4;
  } while (n);
  out.append(b + i, static_cast<size_t>(20 - i));
}
}  // namespace

UpstreamSession::UpstreamSession(asio::io_context& io, tcp::socket sock,
                                 std::unique_ptr<http::FdTls> tls,
                                 std::shared_ptr<asio::ssl::context> ctx, std::string tls_name,
                                 DataPlaneStats& stats)
    : io_(io),
      sock_(std::move(sock)),
      ctx_(std::move(ctx)),
      tls_(std::move(tls)),
      tls_name_(std::move(tls_name)),
      stats_(stats),
      wake_(io),
      settled_(io, asio::steady_timer::time_point::max()),
      idle_since_(std::chrono::steady_clock::now()) {
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, &UpstreamSession::onHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &UpstreamSession::onDataChunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &UpstreamSession::onFrameRecv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &UpstreamSession::onFrameSend);
  nghttp2_session_callbacks_set_on_frame_not_send_callback(cb, &UpstreamSession::onFrameNotSend);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &UpstreamSession::onStreamClose);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);  // a stream's window follows its reader
  nghttp2_session_client_new2(&session_, cb, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  const nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(kStreamWindow)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(UpstreamLeg::kMaxResponseHead)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv, std::size(iv));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnWindow);
  stats_.upstream_h2_sessions.fetch_add(1, std::memory_order_relaxed);
}

UpstreamSession::~UpstreamSession() {
  closeNow();
  nghttp2_session_del(session_);
}

void UpstreamSession::start() {
  asio::co_spawn(io_, reader(), asio::detached);
  asio::co_spawn(io_, writer(), asio::detached);
}

uint32_t UpstreamSession::streamLimit() const {
  return std::min(
      nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS),
      kMaxStreamsPerSession);
}

bool UpstreamSession::usable() const {
  // (not before the engine's SETTINGS: its stream limit is not known; the legs that come
  // meanwhile wait for the connect, UpstreamPool::h2Connecting)
  if (!settings_ || closed_ || goaway_ || !nghttp2_session_check_request_allowed(session_))
    return false;
  return streams_.size() + claims_ < streamLimit();
}

asio::awaitable<bool> UpstreamSession::settled(asio::steady_timer*& t) {
  auto self = shared_from_this();
  while (!settings_ && !closed_) {
    t = &settled_;
    error_code ec;
    co_await settled_.async_wait(useEc(ec));
    t = nullptr;
    if (ec && !settings_ && !closed_) break;  // (cancelled by the leg's abort)
  }
  co_return settings_ && !closed_;
}

UpstreamStream* UpstreamSession::streamOf(nghttp2_session* session, int32_t id) {
  return static_cast<UpstreamStream*>(nghttp2_session_get_stream_user_data(session, id));
}

std::shared_ptr<UpstreamStream> UpstreamSession::open(std::string_view head, std::string_view body,
                                                      std::string& error, bool& retryable) {
  unclaim();  // (the caller's place: taken now, or given back on failure)
  retryable = true;
  if (closed_ || goaway_ || !nghttp2_session_check_request_allowed(session_)) {
    error = "HTTP/2 connection to the engine is closing";
    return nullptr;
  }
  std::vector<Field> fields;
  if (!requestFields(head, tls_ ? "https" : "http", fields, error)) {
    retryable = false;  // (the same on any connection)
    return nullptr;
  }
  auto s = std::make_shared<UpstreamStream>(io_, fields[0].value, UpstreamLeg::kMaxResponseHead);
  s->body.assign(body);
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size());
  for (const auto& f : fields)
    nva.push_back(nv(f.name, f.value,
                     sensitiveField(f.name) ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE));
  nghttp2_data_provider prd;
  prd.source.ptr = s.get();
  prd.read_callback = &UpstreamSession::readBody;
  // (libnghttp2 copies the fields; the body is read from the stream as frames are made)
  const int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                            s->body.empty() ? nullptr : &prd, s.get());
  if (id < 0) {
    if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) goaway_ = true;  // ids used up: a new one
    retryable = id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE;
    error = std::string("HTTP/2 request not submitted: ") + nghttp2_strerror(id);
    return nullptr;
  }
  s->id = id;
  streams_.emplace(id, s);
  stats_.upstream_h2_streams[0].fetch_add(1, std::memory_order_relaxed);
  wakeWriter();
  return s;
}

void UpstreamSession::finish(const std::shared_ptr<UpstreamStream>& s, bool complete) {
  if (!s || s->cancelled) return;
  s->cancelled = true;
  s->data.clear();
  if (!s->ended && !closed_) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s->id,
                              complete ? NGHTTP2_NO_ERROR : NGHTTP2_CANCEL);
    wakeWriter();
  }
  s->wake();
}

void UpstreamSession::consumed(UpstreamStream& s, size_t n) {
  if (n == 0 || s.ended || closed_) return;
  nghttp2_session_consume_stream(session_, s.id, n);
  wakeWriter();
}

int UpstreamSession::onHeader(nghttp2_session* session, const nghttp2_frame* frame,
                              const uint8_t* name, size_t namelen, const uint8_t* value,
                              size_t valuelen, uint8_t, void*) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  UpstreamStream* s = streamOf(session, frame->hd.stream_id);
  // Trailers (a block after the final head) are not relayed: the chunked end carries none.
  if (!s || s->final_head || s->cancelled) return 0;
  s->head.add(std::string_view(reinterpret_cast<const char*>(name), namelen),
              std::string_view(reinterpret_cast<const char*>(value), valuelen));
  return 0;
}

int UpstreamSession::onDataChunk(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                                 size_t len, void* user) {
  auto* self = static_cast<UpstreamSession*>(user);
  // The connection's window reopens at once: one stream's unread bytes never stall another's.
  nghttp2_session_consume_connection(session, len);
  UpstreamStream* s = streamOf(session, id);
  if (!s || s->cancelled || !s->final_head) {  // (no reader: dropped, its window given back)
    nghttp2_session_consume_stream(session, id, len);
    self->wakeWriter();
    return 0;
  }
  if (s->chunked) {
    appendHex(s->data, len);
    s->data.append("\r\n");
  }
  s->data.append(reinterpret_cast<const char*>(data), len);
  if (s->chunked) s->data.append("\r\n");
  s->unconsumed += len;
  s->wake();
  self->wakeWriter();
  return 0;
}

// A response head block ended: its HTTP/1.1 text is queued for the leg.
void UpstreamSession::endHead(UpstreamStream& s) {
  if (s.final_head || s.cancelled) return;
  if (!s.head.finish(s.method, s.data) ||  // too large, or no :status; or 1xx without end
      (s.head.interim() && ++s.interim > UpstreamLeg::kMaxInterim)) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, NGHTTP2_PROTOCOL_ERROR);
    s.cancelled = s.malformed = true;
    s.data.clear();
    wakeWriter();
  } else if (!s.head.interim()) {
    s.final_head = true;
    s.chunked = s.head.chunked();
  }
  s.head.clear();
  s.wake();
}

// The engine's END_STREAM: the response is whole (a chunked body gets its last chunk).
void UpstreamSession::endStream(UpstreamStream& s) {
  if (s.clean || s.cancelled) return;
  if (!s.final_head) return;  // (an END_STREAM on an interim head: libnghttp2 refuses it)
  s.clean = true;
  if (s.chunked) s.data.append("0\r\n\r\n");
  s.wake();
}

int UpstreamSession::onFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  auto* self = static_cast<UpstreamSession*>(user);
  switch (frame->hd.type) {
    case NGHTTP2_SETTINGS:
      if (!(frame->hd.flags & NGHTTP2_FLAG_ACK) && !self->settings_) {
        self->settings_ = true;
        self->settled_.cancel();
      }
      return 0;
    case NGHTTP2_GOAWAY: {
      self->goaway_ = true;  // no new stream; streams past its last id were not processed
      for (auto& [id, s] : self->streams_)
        if (id > frame->goaway.last_stream_id) s->unprocessed = true;
      self->wakeWriter();  // (with no stream open, the connection's end)
      return 0;
    }
    case NGHTTP2_RST_STREAM: {
      UpstreamStream* s = streamOf(session, frame->hd.stream_id);
      if (s && frame->rst_stream.error_code == NGHTTP2_REFUSED_STREAM) s->unprocessed = true;
      return 0;
    }
    case NGHTTP2_HEADERS:
    case NGHTTP2_DATA: {
      UpstreamStream* s = streamOf(session, frame->hd.stream_id);
      if (!s) return 0;
      if (frame->hd.type == NGHTTP2_HEADERS) self->endHead(*s);
      if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) self->endStream(*s);
      return 0;
    }
    default:
      return 0;
  }
}

int UpstreamSession::onFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
    // libnghttp2 ended the connection for the engine's protocol error (a bad preface, a
    // malformed frame), or our reader found one
    auto* self = static_cast<UpstreamSession*>(user);
    if (!self->protocol_error_) {
      self->protocol_error_ = true;
      self->stats_.upstream_h2_protocol_errors.fetch_add(1, std::memory_order_relaxed);
    }
    return 0;
  }
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  UpstreamStream* s = streamOf(session, frame->hd.stream_id);
  if (!s) return 0;
  if (frame->hd.type == NGHTTP2_HEADERS) s->headers_sent = true;
  if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
    s->sent = true;
    std::string().swap(s->body);  // (sent: not held while the answer streams)
    s->wake();
  }
  return 0;
}

// A request's HEADERS that could not go out (the engine's GOAWAY came first): not processed.
int UpstreamSession::onFrameNotSend(nghttp2_session* session, const nghttp2_frame* frame, int,
                                    void*) {
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  if (UpstreamStream* s = streamOf(session, frame->hd.stream_id)) {
    if (!s->headers_sent) s->unprocessed = true;
    s->wake();
  }
  return 0;
}

int UpstreamSession::onStreamClose(nghttp2_session* session, int32_t id, uint32_t code,
                                   void* user) {
  auto* self = static_cast<UpstreamSession*>(user);
  auto it = self->streams_.find(id);
  if (it == self->streams_.end()) return 0;
  const std::shared_ptr<UpstreamStream> s = it->second;
  nghttp2_session_set_stream_user_data(session, id, nullptr);
  self->streams_.erase(it);
  if (code == NGHTTP2_REFUSED_STREAM || !s->headers_sent) s->unprocessed = true;
  s->ended = true;
  // Counted: streams the engine did not process (sent again), and those it reset or cut (not the
  // gateway's own cancels).
  if (s->malformed) {  // (the engine's malformed answer: counted as its reset)
    self->stats_.upstream_h2_streams[2].fetch_add(1, std::memory_order_relaxed);
  } else if (s->cancelled) {
  } else if (s->unprocessed)
    self->stats_.upstream_h2_streams[1].fetch_add(1, std::memory_order_relaxed);
  else if (code != NGHTTP2_NO_ERROR && !s->cancelled)
    self->stats_.upstream_h2_streams[2].fetch_add(1, std::memory_order_relaxed);
  s->wake();
  if (self->streams_.empty()) self->idle_since_ = std::chrono::steady_clock::now();
  self->wakeWriter();  // (after a GOAWAY, the last stream's end is the connection's)
  return 0;
}

ssize_t UpstreamSession::readBody(nghttp2_session*, int32_t, uint8_t* buf, size_t length,
                                  uint32_t* flags, nghttp2_data_source* src, void*) {
  auto* s = static_cast<UpstreamStream*>(src->ptr);
  const size_t n = std::min(length, s->body.size() - s->body_off);
  std::memcpy(buf, s->body.data() + s->body_off, n);
  s->body_off += n;
  if (s->body_off == s->body.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

void UpstreamSession::wakeWriter() {
  if (writer_waiting_) wake_.cancel();
}

void UpstreamSession::close(bool graceful) {
  if (closed_) return;
  if (graceful) {
    // GOAWAY: no new stream; the open ones finish, then the writer closes (libnghttp2 wants
    // neither to read nor to write once none is left).
    if (!goaway_)
      nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, nullptr, 0);
    goaway_ = true;
    wakeWriter();
    return;
  }
  closeNow();
}

void UpstreamSession::closeNow() {
  if (closed_) return;
  closed_ = goaway_ = true;
  stats_.upstream_h2_sessions.fetch_sub(1, std::memory_order_relaxed);
  error_code ec;
  sock_.close(ec);
  for (auto& [id, s] : streams_) {
    // (nothing of libnghttp2's may reach a stream freed once the legs let go of it)
    nghttp2_session_set_stream_user_data(session_, id, nullptr);
    s->ended = s->conn_lost = true;
    if (!s->headers_sent) s->unprocessed = true;
    s->wake();
  }
  streams_.clear();
  settled_.cancel();
  wakeWriter();
}

asio::awaitable<void> UpstreamSession::reader() {
  auto self = shared_from_this();
  std::string buf(kReadBytes, '\0');
  while (!closed_) {
    error_code ec;
    const size_t n = tls_ ? co_await tls_->readSome(sock_, buf.data(), buf.size(), ec)
                          : co_await sock_.async_read_some(asio::buffer(buf), useEc(ec));
    if (closed_) break;  // (closed while the read was queued: its bytes are nobody's)
    if (ec || n == 0) {
      if (!closed_)
        log::debug("proxy", "HTTP/2 connection to an engine ended: " +
                                (ec ? ec.message() : std::string("end of stream")));
      closeNow();
      break;
    }
    if (!settings_ && !received_ &&
        std::string_view("HTTP/1.").starts_with(
            std::string_view(buf.data(), std::min<size_t>(n, 7)))) {
      // The engine speaks HTTP/1.1 only: its answer to our preface is no frame at all (a
      // server's first frame is its SETTINGS, at most 16 KiB long: its first byte is 0).
      spoke_http1_ = true;
      log::debug("proxy", "an engine answered the HTTP/2 preface in HTTP/1.1");
      closeNow();
      break;
    }
    received_ = true;
    const ssize_t rv =
        nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(buf.data()), n);
    if (rv < 0) {
      // A fatal error (a flood, a callback failure): the session ends; the writer sends what it
      // can (a GOAWAY when libnghttp2 queued one) and closes. Streams still open end with it.
      log::warn("proxy", std::string("HTTP/2 protocol error from an engine: ") +
                             nghttp2_strerror(static_cast<int>(rv)));
      if (!protocol_error_) {
        protocol_error_ = true;
        stats_.upstream_h2_protocol_errors.fetch_add(1, std::memory_order_relaxed);
      }
      goaway_ = fatal_ = true;
      nghttp2_session_terminate_session(session_, NGHTTP2_PROTOCOL_ERROR);
      wakeWriter();
      break;
    }
    wakeWriter();
  }
}

asio::awaitable<void> UpstreamSession::writer() {
  auto self = shared_from_this();
  while (!closed_) {
    if (!frameAhead(session_, out_, kWriteAhead, "to an engine")) {
      closeNow();
      co_return;
    }
    if (!out_.empty()) {
      write_pending_ = true;
      write_started_ = std::chrono::steady_clock::now();
      const error_code ec = co_await writeFrames(sock_, tls_.get(), out_);
      write_pending_ = false;
      if (ec) {
        closeNow();
        co_return;
      }
      continue;
    }
    // Nothing more to read or send (GOAWAY exchanged, or a fatal error's GOAWAY sent).
    if (fatal_ || (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_))) {
      closeNow();
      co_return;
    }
    writer_waiting_ = true;
    wake_.expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    co_await wake_.async_wait(useEc(ec));
    writer_waiting_ = false;
  }
}

}  // namespace kvgate::proxy::h2
