// One HTTP/2 client connection (h2_conn.h says the design and the bounds).
#include "proxy/h2/h2_conn.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "http/readiness.h"
#include "http/server.h"
#include "proxy/client_side.h"
#include "proxy/exchange.h"
#include "proxy/h2/bridge.h"
#include "proxy/h2/frames.h"
#include "proxy/worker.h"

namespace kvgate::proxy {

namespace {
constexpr size_t kStreamOutBound = 64 * 1024;  // unframed response bytes per stream
constexpr size_t kWriteAhead = 64 * 1024;      // frames made ahead of the socket
constexpr int32_t kStreamWindow = 256 * 1024;  // request body window per stream
constexpr int32_t kConnWindow = 1024 * 1024;   // and per connection
constexpr size_t kReadBytes = 16 * 1024;
}  // namespace

struct H2Conn::Stream final : ClientSide {
  Stream(H2Conn& c, int32_t id, size_t max_head)
      : c(c), id(id), head(max_head), opened(std::chrono::steady_clock::now()) {}
  H2Conn& c;
  int32_t id;
  h2::RequestHeadBuilder head;
  std::string body;
  std::chrono::steady_clock::time_point opened;
  bool request_done = false;  // END_STREAM from the client, or answered without a request path
  bool closed = false;        // libnghttp2 closed it (ended, reset, or the connection went)
  bool running = false;       // its request path runs
  std::shared_ptr<Exchange> runner;  // its request path
  size_t held = 0;        // request bytes counted in the connection's body_bytes_
  size_t unconsumed = 0;  // DATA bytes not yet given back to the windows (budget full)
  std::chrono::steady_clock::time_point progress;  // response bytes last taken by the framer
  // The response.
  bool submitted = false;
  bool eof = false;
  bool deferred = false;     // the data source said "nothing yet": resume when bytes come
  bool reset_after = false;  // answered before the request ended: RST_STREAM once it is sent
  bool reset_sent = false;   // RST_STREAM submitted: nothing more is framed
  std::string out;           // payload not yet framed
  size_t out_off = 0;
  std::unique_ptr<asio::steady_timer> waiter;  // the request path waits for room

  size_t pending() const { return out.size() - out_off; }
  // ClientSide (client_side.h): the answer's head as fields, the payload unframed, a reset.
  bool multiplexed() const override { return true; }
  bool payloadOnly() const override { return true; }
  bool writeHead(const HeadFields& h) override;
  asio::awaitable<bool> write(std::string_view a, std::string_view b) override;
  void finish(bool complete) override;
  void close() override;
  bool requestReleasable() const override { return true; }
  void releaseRequest() override { c.releaseBody(*this); }
  std::string_view protoName() const override { return "h2"; }
  void reset(uint32_t code) {
    if (reset_sent || closed || c.closed_) return;
    reset_sent = true;
    nghttp2_submit_rst_stream(c.session_, NGHTTP2_FLAG_NONE, id, code);
    wake();
    c.wakeWriter();
  }
  void wake() {
    if (waiter) waiter->cancel();
  }
};

// The answer's head (an engine's or the gateway's own, as fields: no text read back): HEADERS
// after :status, and the data source unless the answer has no body. (reset wakes the writer.)
bool H2Conn::Stream::writeHead(const HeadFields& h) {
  if (closed || c.closed_ || reset_sent) return false;
  // (a second head is the request path's error: the stream must not end whole)
  if (submitted || h.status < 200 || h.status > 999) {
    reset(NGHTTP2_INTERNAL_ERROR);
    return false;
  }
  const std::string code = std::to_string(h.status);
  std::vector<nghttp2_nv> nva;
  nva.reserve(h.size() + 1);
  nva.push_back(h2::nv(":status", code));
  // (a request id is unique: kept out of the HPACK table, where it would only evict fields that
  // repeat)
  for (size_t i = 0; i < h.size(); ++i)
    nva.push_back(
        h2::nv(h.name(i), h.value(i),
               h.name(i) == "x-request-id" ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE));
  const bool no_body = head.method() == "HEAD" || h.status == 204 || h.status == 304;
  nghttp2_data_provider prd;
  prd.source.ptr = this;
  prd.read_callback = &H2Conn::readData;
  // (libnghttp2 copies the fields)
  const int rv =
      nghttp2_submit_response(c.session_, id, nva.data(), nva.size(), no_body ? nullptr : &prd);
  submitted = true;
  progress = std::chrono::steady_clock::now();
  if (rv != 0) {
    reset(NGHTTP2_INTERNAL_ERROR);
    return false;
  }
  if (no_body) eof = true;
  return true;
}

asio::awaitable<bool> H2Conn::Stream::write(std::string_view a, std::string_view b) {
  for (std::string_view piece : {a, b}) {
    if (closed || c.closed_ || reset_sent) co_return false;
    if (piece.empty()) continue;
    if (!submitted) {  // (payload before a head: the request path's error, never the client's)
      reset(NGHTTP2_INTERNAL_ERROR);
      c.wakeWriter();
      co_return false;
    }
    if (!eof) out.append(piece);
  }
  if (pending() > 0 && deferred) {
    deferred = false;
    progress = std::chrono::steady_clock::now();  // (stalled since: the framer's last take)
    nghttp2_session_resume_data(c.session_, id);
  }
  c.wakeWriter();
  while (pending() > kStreamOutBound && !closed && !c.closed_ && !reset_sent) {
    if (!waiter) waiter = std::make_unique<asio::steady_timer>(c.w_.io);
    waiter->expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    co_await waiter->async_wait(useEc(ec));
  }
  co_return !closed && !c.closed_ && !reset_sent;
}

// The request path gives up on the stream (its deadline): the client is told, the writer woken.
void H2Conn::Stream::close() { reset(NGHTTP2_CANCEL); }

void H2Conn::Stream::finish(bool complete) {
  if (closed || c.closed_ || reset_sent) return;
  if (!submitted || !complete) {
    reset(NGHTTP2_INTERNAL_ERROR);
  } else if (!eof) {
    eof = true;
    if (deferred) {
      deferred = false;
      nghttp2_session_resume_data(c.session_, id);
    }
  }
  c.wakeWriter();
}

H2Conn::H2Conn(Worker& w, std::shared_ptr<Listener> l, tcp::socket s, tcp::endpoint peer,
               std::unique_ptr<http::FdTls> tls, std::shared_ptr<asio::ssl::context> tls_ctx)
    : w_(w),
      l_(std::move(l)),
      sock_(std::move(s)),
      peer_(peer),
      tls_ctx_(std::move(tls_ctx)),
      tls_(std::move(tls)),
      wake_(w.io),
      idle_since_(std::chrono::steady_clock::now()) {
  nghttp2_session_callbacks* cb = nullptr;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &H2Conn::onBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(cb, &H2Conn::onHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &H2Conn::onDataChunk);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &H2Conn::onFrameRecv);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &H2Conn::onStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &H2Conn::onFrameSend);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);  // the windows follow the body budget
  nghttp2_session_server_new2(&session_, cb, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  const nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, w_.opts.h2_max_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(kStreamWindow)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(w_.opts.max_head_bytes)},
      // The HPACK table the client's encoder may fill here (the protocol's default, said
      // explicitly): a header block asking for more is a COMPRESSION_ERROR.
      {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 4096},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv, std::size(iv));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnWindow);
  w_.stats.h2_connections.fetch_add(1, std::memory_order_relaxed);
}

H2Conn::~H2Conn() {
  streams_.clear();
  nghttp2_session_del(session_);
  w_.stats.h2_connections.fetch_sub(1, std::memory_order_relaxed);
}

int H2Conn::onBeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  auto* c = static_cast<H2Conn*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  const int32_t id = frame->hd.stream_id;
  // Request paths still running count against the limit too: a stream the client reset still
  // has its engine request to abort.
  if (c->l_->closed.load()) c->drain();  // (the rule went: no new streams, GOAWAY)
  if (c->draining_ || c->running_ >= c->w_.opts.h2_max_streams ||
      c->streams_.size() >= 2 * static_cast<size_t>(c->w_.opts.h2_max_streams)) {
    c->w_.stats.h2_refused_streams.fetch_add(1, std::memory_order_relaxed);
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
    return 0;  // (no stream data: its headers and DATA are ignored)
  }
  auto s = std::make_unique<Stream>(*c, id, c->w_.opts.max_head_bytes);
  Stream& st = *s;
  nghttp2_session_set_stream_user_data(session, id, s.get());
  c->streams_.emplace(id, std::move(s));
  c->w_.stats.h2_streams_total.fetch_add(1, std::memory_order_relaxed);
  // Over the memory bound (proxy/overload.h): refused before its body is read, as on HTTP/1.1.
  if (c->w_.stats.overload.level.load(std::memory_order_relaxed) != 0) {
    c->w_.stats.overload_shed.fetch_add(1, std::memory_order_relaxed);
    c->answer(st, 503, "gateway_overloaded",
              "the gateway is at its memory bound (--max-heap-bytes); try again");
  }
  return 0;
}

int H2Conn::onHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                     size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
  // Only the request's own header block: trailers never become request fields.
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto* s =
      static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
  if (!s || s->request_done) return 0;
  s->head.add(std::string_view(reinterpret_cast<const char*>(name), namelen),
              std::string_view(reinterpret_cast<const char*>(value), valuelen));
  if (s->head.status() != 0)  // (431: answered now, before any body is held)
    static_cast<H2Conn*>(user)->answer(*s, s->head.status(), "request_header_too_large",
                                       s->head.error());
  return 0;
}

int H2Conn::onDataChunk(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                        size_t len, void* user) {
  auto* c = static_cast<H2Conn*>(user);
  auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, id));
  if (!s || s->request_done) {  // (answered already: the bytes are dropped, the window reopened)
    nghttp2_session_consume(session, id, len);
    return 0;
  }
  if (s->body.size() + len > c->w_.opts.max_body_bytes) {
    nghttp2_session_consume(session, id, len);
    c->answer(*s, 413, "request_too_large", "request body too large");
    return 0;
  }
  s->body.append(reinterpret_cast<const char*>(data), len);
  s->held += len;
  c->body_bytes_ += len;
  // Past the budget the windows stay shut (the client waits until requests finish), except the
  // oldest request still arriving: one request always completes, so streams cannot starve each
  // other (the bytes held stay under twice --max-body-bytes).
  if (c->body_bytes_ <= c->w_.opts.max_body_bytes || id == c->oldestArriving())
    nghttp2_session_consume(session, id, len);
  else
    s->unconsumed += len;
  return 0;
}

// The stream a HEADERS or DATA frame with END_STREAM ends (null: another frame, or no stream).
H2Conn::Stream* H2Conn::endedBy(nghttp2_session* session, const nghttp2_frame* frame) {
  if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
      !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
    return nullptr;
  return static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
}

int H2Conn::onFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  auto* c = static_cast<H2Conn*>(user);
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    c->w_.stats.h2_client_resets.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  Stream* s = endedBy(session, frame);
  if (s && !s->request_done) c->startStream(*s);
  return 0;
}

// The gateway's own answer to a request still being sent went out: the client is told to stop
// sending (RFC 9113 §8.1), after the answer so the reset does not overtake it.
int H2Conn::onFrameSend(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
    // libnghttp2 ended the connection: a protocol error or a flood of the client's
    static_cast<H2Conn*>(user)->w_.stats.h2_protocol_errors.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  Stream* s = endedBy(session, frame);
  if (s && s->reset_after) {
    s->reset_after = false;
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_NO_ERROR);
  }
  return 0;
}

int H2Conn::onStreamClose(nghttp2_session* session, int32_t id, uint32_t, void* user) {
  auto* c = static_cast<H2Conn*>(user);
  auto* s = static_cast<Stream*>(nghttp2_session_get_stream_user_data(session, id));
  if (!s) return 0;
  nghttp2_session_set_stream_user_data(session, id, nullptr);
  s->closed = true;
  s->wake();
  if (s->running && s->runner) s->runner->clientLeft();  // its engine request is aborted
  c->eraseIfDone(*s);
  return 0;
}

ssize_t H2Conn::readData(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags,
                         nghttp2_data_source* src, void*) {
  auto* s = static_cast<Stream*>(src->ptr);
  const size_t n = std::min(length, s->pending());
  if (n > 0) {
    std::memcpy(buf, s->out.data() + s->out_off, n);
    s->out_off += n;
    s->progress = std::chrono::steady_clock::now();
    if (s->out_off == s->out.size()) {  // all taken: nothing held while the stream waits
      std::string().swap(s->out);
      s->out_off = 0;
    }
    if (s->pending() <= kStreamOutBound) s->wake();
  }
  if (s->pending() == 0 && s->eof) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  } else if (n == 0) {
    s->deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

void H2Conn::startStream(Stream& s) {
  std::string bytes;
  if (!s.head.finish(s.body.size(), bytes)) {
    answer(s, s.head.status(),
           s.head.status() == 431   ? "request_header_too_large"
           : s.head.status() == 501 ? "not_implemented"
                                    : "bad_request",
           s.head.error(), true);
    return;
  }
  s.request_done = true;
  bytes.append(s.body);
  std::string().swap(s.body);
  launch(s, std::move(bytes));
}

void H2Conn::launch(Stream& s, std::string bytes) {
  body_bytes_ += bytes.size() - s.held;  // (the head's bytes too, while the request runs)
  s.held = bytes.size();
  // The request path exists from here: a reset that arrives before its coroutine first runs
  // (a HEADERS and an RST_STREAM in one read) reaches it (onStreamClose), and it sends nothing.
  s.runner = std::make_shared<Exchange>(w_, l_, s);
  s.runner->setPeer(peer_);
  s.running = true;
  ++running_;
  w_.stats.h2_active_streams.fetch_add(1, std::memory_order_relaxed);
  asio::co_spawn(w_.io, serveStream(shared_from_this(), &s, std::move(bytes)), asio::detached);
}

asio::awaitable<void> H2Conn::serveStream(std::shared_ptr<H2Conn> self, Stream* s,
                                          std::string bytes) {
  struct Done {  // on every path, an exception included
    H2Conn& c;
    Stream& s;
    ~Done() {
      s.runner->detachClient();  // (an exchange a P/D drain keeps writes to nobody)
      s.runner.reset();
      s.running = false;
      --c.running_;
      c.w_.stats.h2_active_streams.fetch_sub(1, std::memory_order_relaxed);
      if (c.running_ == 0) c.idle_since_ = std::chrono::steady_clock::now();
      c.releaseBody(s);
      c.eraseIfDone(s);
      c.wakeWriter();
    }
  } done{*this, *s};
  const std::shared_ptr<Exchange> ex = s->runner;
  co_await ex->runStream(std::move(bytes));
}

void H2Conn::answer(Stream& s, int status, std::string_view code, std::string_view message,
                    bool request_ended) {
  if (s.request_done) return;
  s.reset_after = !request_ended;  // (the client may still be sending: told to stop)
  s.request_done = true;
  giveBackWindow(s);
  releaseBody(s);
  std::string().swap(s.body);
  // Counted and logged as HTTP/1.1 counts its own refusals of unreadable requests.
  metrics::aiRequests().count({}, {}, status, metrics::AiOutcome::kFailed);
  if (w_.opts.access_log) {
    std::string line = "access";
    log::appendField(line, "proto", "h2");
    log::appendField(line, "listener", l_->key);
    log::appendField(line, "status", std::to_string(status));
    log::appendField(line, "error", code);
    log::info("proxy", line);
  }
  const std::string body = openAiError(status, code, message);
  HeadFields h;
  h.status = status;
  h.add("content-type", "application/json");
  h.add("content-length", std::to_string(body.size()));
  l_->unrouted.inc(status);
  if (s.writeHead(h)) {
    s.out = body;
    s.eof = true;
  }
  wakeWriter();
}

void H2Conn::releaseBody(Stream& s) {
  body_bytes_ -= std::min(body_bytes_, s.held);
  s.held = 0;
  consumePending();
}

// A stream's DATA held back from the windows is given back (its body is no longer wanted).
void H2Conn::giveBackWindow(Stream& s) {
  if (s.unconsumed == 0) return;
  if (!s.closed)
    nghttp2_session_consume(session_, s.id, s.unconsumed);
  else
    nghttp2_session_consume_connection(session_, s.unconsumed);
  s.unconsumed = 0;
  wakeWriter();
}

// DATA held back while the connection's budget was full: the windows reopen as it frees.
void H2Conn::consumePending() {
  for (auto& [id, st] : streams_) {
    if (body_bytes_ > w_.opts.max_body_bytes) break;
    giveBackWindow(*st);
  }
}

int32_t H2Conn::oldestArriving() const {
  int32_t oldest = 0;
  for (const auto& [id, st] : streams_)
    if (!st->request_done && !st->closed && (oldest == 0 || id < oldest)) oldest = id;
  return oldest;
}

void H2Conn::eraseIfDone(Stream& s) {
  if (!s.closed || s.running) return;
  giveBackWindow(s);
  releaseBody(s);
  streams_.erase(s.id);
  if (streams_.empty()) idle_since_ = std::chrono::steady_clock::now();
}

void H2Conn::wakeWriter() {
  if (writer_waiting_) wake_.cancel();
}

// libnghttp2 has nothing more to read or send: the streams are over (GOAWAY and no open
// stream), or the session was terminated (a protocol error or a flood; request paths still
// running are reset as the connection closes).
bool H2Conn::done() const {
  return closed_ || (!nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_));
}

void H2Conn::closeNow() {
  if (closed_) return;
  closed_ = true;
  error_code ec;
  sock_.close(ec);
  for (auto& [id, s] : streams_) s->wake();
  resetRunners();
  wakeWriter();
}

// Request paths still running whose client can no longer be answered: their engine requests end.
void H2Conn::resetRunners() {
  for (auto& [id, s] : streams_)
    if (s->running && s->runner) s->runner->clientLeft();
}

void H2Conn::drain() {
  if (draining_ || closed_) return;
  draining_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  wakeWriter();
}

// Frames what libnghttp2 has to send (at most kWriteAhead ahead of the socket) and writes it.
asio::awaitable<void> H2Conn::writer() {
  auto self = shared_from_this();
  while (!closed_) {
    if (!h2::frameAhead(session_, out_, kWriteAhead, "to a client")) {
      closeNow();
      co_return;
    }
    if (!out_.empty()) {
      write_pending_ = true;
      write_started_ = std::chrono::steady_clock::now();
      const error_code ec = co_await h2::writeFrames(sock_, tls_.get(), out_);
      write_pending_ = false;
      if (ec) {
        closeNow();
        co_return;
      }
      continue;
    }
    if (done() || (draining_ && running_ == 0 && streams_.empty())) {
      // Everything is out: our side is shut and the client's last bytes read until it closes
      // (at most 2 s: the ticker), so a close with unread bytes does not reset the connection
      // and lose the GOAWAY or a response's end.
      closing_ = true;
      closing_since_ = std::chrono::steady_clock::now();
      if (tls_) {  // close_notify: the end of the stream is not taken for a truncation
        write_pending_ = true;
        write_started_ = closing_since_;
        co_await tls_->shutdown(sock_);
        write_pending_ = false;
      }
      sock_.shutdown(tcp::socket::shutdown_send, ec_ignored_);
      resetRunners();
      co_return;
    }
    writer_waiting_ = true;
    wake_.expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    co_await wake_.async_wait(useEc(ec));
    writer_waiting_ = false;
  }
}

// Every second: a stream whose request is not complete within --header-timeout gets 408 (time
// it waits on the connection's body budget, the gateway's doing, is not held against it); a
// stream whose unsent answer the client has not taken for --idle-timeout-ms (no window, not
// reading) is reset; a connection with no stream for --idle-timeout-ms gets GOAWAY; a graceful
// close whose client does not close within 2 s, or a socket that takes no byte for
// --idle-timeout-ms, is closed.
asio::awaitable<void> H2Conn::ticker() {
  auto self = shared_from_this();
  asio::steady_timer t(w_.io);
  const auto idle = w_.opts.client_idle_timeout;
  while (!closed_) {
    t.expires_after(std::chrono::seconds(1));
    error_code ec;
    co_await t.async_wait(useEc(ec));
    if (closed_) break;
    const auto now = std::chrono::steady_clock::now();
    if (closing_ && now - closing_since_ > std::chrono::seconds(2)) {
      closeNow();
      break;
    }
    if (write_pending_ && now - write_started_ > idle) {
      log::debug("proxy", "HTTP/2 client takes no bytes: connection closed");
      closeNow();
      break;
    }
    if (l_->closed.load() || w_.draining) drain();
    std::vector<Stream*> late, stalled;
    for (auto& [id, s] : streams_) {
      if (s->closed) continue;
      if (!s->request_done && s->unconsumed == 0 && now - s->opened > w_.opts.header_timeout)
        late.push_back(s.get());
      else if (s->submitted && !s->reset_sent && s->pending() > 0 && now - s->progress > idle)
        stalled.push_back(s.get());
    }
    for (Stream* s : late)
      answer(*s, 408, "timeout", "request header or body not received in time");
    for (Stream* s : stalled) {
      s->reset(NGHTTP2_CANCEL);
      if (s->runner) s->runner->clientLeft();
    }
    if (streams_.empty() && running_ == 0 && now - idle_since_ > idle) drain();
  }
}

// Stream 1 of an upgraded connection: the HTTP/1.1 request, complete (it had no body), half
// closed by the client (libnghttp2's upgrade applies the client's HTTP2-Settings).
bool H2Conn::startUpgraded(Upgrade& up) {
  const int rv =
      nghttp2_session_upgrade2(session_, reinterpret_cast<const uint8_t*>(up.settings.data()),
                               up.settings.size(), up.method == "HEAD" ? 1 : 0, nullptr);
  if (rv != 0) {
    log::debug("proxy", std::string("HTTP/2 upgrade refused: ") + nghttp2_strerror(rv));
    return false;
  }
  auto s = std::make_unique<Stream>(*this, 1, w_.opts.max_head_bytes);
  Stream& st = *s;
  st.head.presetMethod(up.method);
  st.request_done = true;
  nghttp2_session_set_stream_user_data(session_, 1, s.get());
  streams_.emplace(1, std::move(s));
  w_.stats.h2_streams_total.fetch_add(1, std::memory_order_relaxed);
  launch(st, std::move(up.request));
  return true;
}

asio::awaitable<void> H2Conn::run(std::string preread, std::unique_ptr<Upgrade> upgrade) {
  auto self = shared_from_this();
  if (upgrade && !startUpgraded(*upgrade)) {
    closeNow();
    co_return;
  }
  if (w_.draining || l_->closed.load()) drain();  // (a drain that came during the preface)
  asio::co_spawn(w_.io, writer(), asio::detached);
  asio::co_spawn(w_.io, ticker(), asio::detached);
  feed(preread.data(), preread.size());
  preread = std::string();
  if (tls_) {
    // OpenSSL reads the socket itself and may suspend inside the read: the connection's own
    // buffer, held across the wait.
    std::string buf(kReadBytes, '\0');
    while (!closed_) {
      error_code ec;
      const size_t n = co_await tls_->readSome(sock_, buf.data(), buf.size(), ec);
      if (ec || n == 0) {
        closeNow();
        break;
      }
      feed(buf.data(), n);
    }
    co_return;
  }
  // Plain TCP: wait for readiness holding no buffer, then receive into the worker's scratch
  // and hand the bytes to libnghttp2 before anything can suspend (it copies what it keeps), so
  // an idle connection holds no read buffer (16 KiB a connection before). (A build without own
  // readiness tracking, http/readiness.h, pays an EAGAIN receive per wake here.)
  for (uint32_t woke_by = http::kUnknownEvents, reads = 0; !closed_;) {
    if (http::worthRecv(sock_, woke_by)) {
      http::RecvResult got;
      {  // (the scratch is never held across a suspension)
        error_code ec;
        size_t n = 0;
        Worker::Scratch scratch(w_);
        got = http::tryRecv(sock_, scratch.data(), scratch.size(), n, ec, woke_by);
        if (got == http::RecvResult::kBytes) feed(scratch.data(), n);
      }
      if (got == http::RecvResult::kEof || got == http::RecvResult::kError) {
        closeNow();
        break;
      }
      if (got == http::RecvResult::kBytes) {
        woke_by = http::kUnknownEvents;
        // The writer runs before the next read when this one queued frames (ACKs, resets,
        // WINDOW_UPDATEs: libnghttp2's flood limits count what is queued, not what is sent), and
        // every fourth read anyway (a client that keeps sending cannot hold the worker).
        if (nghttp2_session_want_write(session_) || ++reads % 4 == 0)
          co_await asio::post(w_.io, asio::use_awaitable);
        continue;
      }
    }
    http::watchPeerClose(sock_);  // (once per socket: lets a short read prove it drained)
    error_code ec;
    woke_by = co_await http::asyncWaitReadable(sock_, useEc(ec));
    if (ec) {
      closeNow();
      break;
    }
  }
}

void H2Conn::feed(const char* p, size_t n) {
  // After GOAWAY or a protocol error libnghttp2 reads nothing more: the bytes are dropped
  // until the writer's close (bounded in time by the ticker), which ends the read loop.
  if (n == 0 || closed_ || fatal_ || !nghttp2_session_want_read(session_)) return;
  // (It takes every byte unless a callback pauses it, which none of ours does: the scratch's
  // bytes are gone after this call.)
  const ssize_t r = nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(p), n);
  if (r < 0) {
    log::debug("proxy", std::string("HTTP/2 connection error: ") + nghttp2_strerror(int(r)));
    // A fatal error (a broken preface, e.g. after an Upgrade's 101; a flood; a callback
    // failure): libnghttp2 returns it without queueing anything, so the GOAWAY is ours
    // (counted as it is sent, a no-op when one is queued already); the streams' engine
    // requests end; the writer closes once it is out.
    nghttp2_session_terminate_session(
        session_, r == NGHTTP2_ERR_FLOODED ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
    resetRunners();
    fatal_ = true;
    draining_ = true;
    wakeWriter();
    return;
  }
  if (!streams_.empty()) idle_since_ = std::chrono::steady_clock::now();
  wakeWriter();
}

}  // namespace kvgate::proxy
