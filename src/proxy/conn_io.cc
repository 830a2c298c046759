// ClientConn plumbing: the deadline's actions, client reads and writes, the gateway's error
// answers, response counting, the client-disconnect watcher and the access log.
#include <sys/socket.h>

#include <cerrno>

#include "common/log.h"
#include "engines/anthropic_messages.h"
#include "http/readiness.h"
#include "http/server.h"
#include "http/tls.h"
#include "proxy/client_conn.h"

namespace kvgate::proxy {

std::string openAiError(int status, std::string_view code, std::string_view message,
                        std::string_view param) {
  std::string b = "{\"error\":{\"message\":\"" + http::jsonEscape(message) + "\",\"type\":\"";
  b += status >= 500 ? (status == 501 ? "not_active" : "server_error") : "invalid_request_error";
  b += "\",\"param\":";
  b += param.empty() ? std::string("null") : "\"" + http::jsonEscape(param) + "\"";
  b += ",\"code\":\"" + http::jsonEscape(code) + "\"}}";
  return b;
}

// The error body in the request's API shape: OpenAI's, or Anthropic's on the Messages paths
// ({"type":"error","error":{"type","message"}}: the type from the status, the gateway's code in
// the access log and metrics only).
std::string ClientConn::errorBody(int status, std::string_view code, std::string_view message,
                                  std::string_view param) const {
  if (rq_.api != Api::kMessages && rq_.api != Api::kCountTokens)
    return openAiError(status, code, message, param);
  return engines::anthropic::errorBody(engines::anthropic::errorType(status), message);
}

void ClientConn::onDeadline() {
  switch (phase_) {
    case Phase::kHead:
    case Phase::kBody: {
      static const char k408[] =
          "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: "
          "close\r\nContent-Length: 116\r\n\r\n{\"error\":{\"message\":\"request header or body "
          "not received in time\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":"
          "\"timeout\"}}";
      // (TLS: no plaintext on the wire; the connection just closes)
      if (!tls_ && !sink_)
        ::send(client_.native_handle(), k408, sizeof(k408) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      l_->unrouted.inc(408);
      // (counted as the request ends; not over an answer already sent, e.g. a stalled 413)
      if (phase_ == Phase::kBody && rq_.outcome.status == 0) rq_.outcome.status = 408;
      closeClient();
      break;
    }
    case Phase::kConnect:
    case Phase::kAwaitResponse:
      abortLegs(true);
      break;
    default:
      abortLegs(true);
      closeClient();
  }
}

asio::awaitable<bool> ClientConn::readMore(Buffer& b, tcp::socket& s) {
  error_code ec;
  size_t n = 0;
  if (sink_ && &s == &client_) co_return false;  // (stream mode: the request is all in in_)
  if (tls_ && &s == &client_) {
    if (!pipelined_.empty()) {  // (decrypted by the watcher: they come first)
      b.append(pipelined_.data(), pipelined_.size());
      pipelined_.clear();
      co_return true;
    }
    auto room = b.prepare(kReadChunk);
    n = co_await tls_->readSome(client_, static_cast<char*>(room.data()), room.size(), ec);
    client_eof_ |= ec || n == 0;
    if (ec || n == 0) co_return false;
    b.commit(n);
    co_return true;
  }
  // Plain TCP: a recv only when bytes may be there, else a wait that costs no syscall
  // (http/readiness.h); the buffer's room is taken when the bytes are.
  for (uint32_t woke_by = http::kUnknownEvents;;) {
    auto room = b.prepare(kReadChunk);
    switch (http::tryRecv(s, static_cast<char*>(room.data()), room.size(), n, ec, woke_by)) {
      case http::RecvResult::kBytes:
        b.commit(n);
        co_return true;
      case http::RecvResult::kWouldBlock:
        break;
      default:
        co_return false;
    }
    http::watchPeerClose(s);  // (once per connection: lets a short read prove it drained)
    woke_by = co_await http::asyncWaitReadable(s, useEc(ec));
    if (ec) co_return false;
  }
}

asio::awaitable<bool> ClientConn::writeClient(std::string_view a, std::string_view b) {
  if (sink_) co_return co_await sink_->write(a, b);
  if (tls_) co_return !(co_await tlsWrite(a, b));
  co_return !(co_await writeTwo(client_, a, b));
}

asio::awaitable<error_code> ClientConn::tlsWrite(std::string_view a, std::string_view b) {
  co_return co_await tls_->write(client_, a, b);
}

asio::awaitable<bool> ClientConn::acceptTls(const http::TlsFiles& files,
                                            const std::shared_ptr<asio::ssl::context>& ctx) {
  tls_ctx_ = ctx;
  error_code ec;
  // (OpenSSL reads and writes the descriptor itself; the accept loop made it non-blocking)
  if (!client_.non_blocking()) client_.non_blocking(true, ec);
  tls_ = std::make_unique<http::FdTls>(client_, tls_ctx_->native_handle());
  phase_ = Phase::kHead;  // (the deadline's expiry closes a stalled handshake)
  deadline_.expireAfter(w_.opts.header_timeout);
  ec = tls_->ok() ? co_await tls_->handshake(client_, true) : asio::error::no_memory;
  deadline_.clear();
  phase_ = Phase::kIdle;
  files.noteHandshake(tls_->native(), ec);
  if (ec) {
    w_.stats.tls_handshake_failures.fetch_add(1, std::memory_order_relaxed);
    log::debug("proxy", "TLS handshake failed: " + ec.message());
    closeClient();
    co_return false;
  }
  w_.stats.tls_handshakes.fetch_add(1, std::memory_order_relaxed);
  co_return true;
}

asio::awaitable<void> ClientConn::sendError(int status, std::string_view code, std::string_view msg,
                                            std::string_view param, bool close,
                                            int64_t retry_after_s) {
  if (close) client_keep_alive_ = false;
  std::string body = errorBody(status, code, msg, param);
  HeadFields& h = ownHead(status);
  h.add("content-type", "application/json");
  h.add("content-length", std::to_string(body.size()));
  if (retry_after_s > 0) h.add("retry-after", std::to_string(retry_after_s));
  addRuleHeaders(h);
  rq_.outcome.status = status;
  countResponse(status);
  co_await writeAnswer(body);
}

asio::awaitable<bool> ClientConn::writeAnswer(std::string_view body) {
  // (a HEAD request's answer has the head only: its Content-Length is the body it would have;
  // 204 and 304 have none)
  if (rq_.head_method || own_fields_.status == 204 || own_fields_.status == 304) body = {};
  const HeadFields& h = own_fields_;
  if (sink_) {
    if (!sink_->writeHead(h)) co_return false;
    co_return co_await sink_->write({}, body);
  }
  std::string t = "HTTP/1.1 ";
  t.append(std::to_string(h.status)).append(" ").append(http::statusReason(h.status));
  t.append("\r\n");
  for (size_t i = 0; i < h.size(); ++i) {
    // (the names are lower-case: each word capitalised, as HTTP/1.1 clients have seen them)
    bool word = true;
    for (char c : h.name(i)) {
      t.push_back(word && c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c);
      word = c == '-';
    }
    t.append(": ").append(h.value(i)).append("\r\n");
  }
  if (!keepAliveAfter()) t.append("Connection: close\r\n");
  t.append("\r\n");
  co_return co_await writeClient(t, body);
}

// Counts the response once, under the most specific owner known: the endpoint, else the rule,
// else the listener (answers before routing).
void ClientConn::countResponse(int status) {
  if (rq_.outcome.route && rq_.outcome.ep_index >= 0)
    rq_.outcome.route->ep_counters[static_cast<size_t>(rq_.outcome.ep_index)]->inc(status);
  else if (rq_.outcome.route)
    rq_.outcome.route->stats->no_endpoint.inc(status);
  else
    l_->unrouted.inc(status);
}

// The leg had to wait for the upstream. The client is watched only once a wait has lasted into
// the deadline's next tick (at most Deadline::kTick later, see onTick): most requests are answered
// well within that, and starting a watcher costs a coroutine, a queued read, a cancel and a
// scheduler round trip per request. A client that leaves during a long prefill or stream is
// still seen within about a second, and the engine's request aborted.
void ClientConn::onUpstreamWait() { watch_wanted_ = true; }

// Deadline tick (no expiry; also a wake-up because the deadline moved earlier): start the
// watcher if a request still waits on its upstream, unless
// the watcher already holds the bound of pipelined bytes (then TCP pushes back on the client).
void ClientConn::onTick() {
  if (sink_) return;  // (stream mode: the connection sees a reset or a close)
  if (!watch_wanted_ || watch_running_ || client_gone_ || pipelined_.size() >= kMaxPipelinedBytes)
    return;
  if (phase_ != Phase::kConnect && phase_ != Phase::kAwaitResponse && phase_ != Phase::kRelay &&
      phase_ != Phase::kStream)
    return;
  watching_ = true;
  startWatch();
}

void ClientConn::startWatch() {
  watch_running_ = true;
  armWatch(++watch_gen_);
}

// Watches the client socket while the upstream makes us wait: EOF or an error means the client
// went away, so the upstream connection is closed and the engine aborts the request. Bytes of a
// pipelined request are kept (at most kMaxPipelinedBytes; then the watcher stops and TCP pushes
// back) for the next request. No coroutine and no buffer while it waits: a readiness wait whose
// handler holds the connection and the watch's generation (an open stream costs one small
// reactor op). The socket is read on the spot first: bytes or a close that came before the wait
// was armed raise no new edge for it.
void ClientConn::armWatch(uint64_t gen) {
  bool want_write = false;  // (TLS: wait until the socket takes bytes, then read again)
  for (;;) {
    if (pipelined_.size() >= kMaxPipelinedBytes) {
      watch_running_ = false;
      return;
    }
    char buf[4096];
    size_t room = std::min(sizeof buf, kMaxPipelinedBytes - pipelined_.size());
    if (tls_) {  // (decrypted bytes of a pipelined request; OpenSSL's buffered records first)
      if (tls_->writing()) {  // a record half-sent: read after it (the writer sees a close too)
        want_write = true;
        break;
      }
      error_code ec;
      http::FdTls::Want want = http::FdTls::Want::kNothing;
      const size_t got = tls_->readNow(client_, buf, room, ec, want);
      if (got > 0) {
        pipelined_.append(buf, got);
        continue;
      }
      if (want != http::FdTls::Want::kNothing) {
        want_write = want == http::FdTls::Want::kWrite;
        break;
      }
    } else {
      ssize_t n = ::recv(client_.native_handle(), buf, room, MSG_DONTWAIT);
      if (n > 0) {
        pipelined_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    }
    client_gone_ = true;  // EOF or error: the client went away
    watch_running_ = false;
    abortLegs(false);  // the engine sees the disconnect and aborts the request
    return;
  }
  client_.async_wait(want_write ? tcp::socket::wait_write : tcp::socket::wait_read,
                    [self = shared_from_this(), gen](const error_code&) {
    // A stopped watch (cancelled, or an older generation) leaves the connection alone.
    if (gen != self->watch_gen_ || !self->watching_ || !self->watch_running_) return;
    self->armWatch(gen);  // readable (or closed): read it
  });
}

// Stops the watcher: its pending wait is cancelled and its completion, when it runs, sees a newer
// generation and does nothing. The wait reads nothing, so the connection may read the client
// again at once.
void ClientConn::stopWatch() {
  watch_wanted_ = false;  // the wait is over: the tick must not start a watcher now
  if (!watching_) return;
  watching_ = false;
  ++watch_gen_;
  if (!watch_running_) return;
  watch_running_ = false;
  error_code ec;
  client_.cancel(ec);
}

// The model label of loxilb_ai_requests_total and loxilb_ai_active_streams: the rule's
// model_name when it has one; else the request's model once a credential was admitted (engines
// such as llama.cpp or SGLang answer any model name, so an answer vouches for nothing); else "".
// Anonymous clients on a catch-all rule cannot fill the bounded label set.
std::string_view ClientConn::aiModelLabel() const {
  if (rq_.outcome.route && !rq_.outcome.route->rule.model_name.empty())
    return rq_.outcome.route->rule.model_name;
  if (!rq_.outcome.key_id.empty() || !rq_.outcome.tenant.empty() || !rq_.outcome.user.empty())
    return rq_.outcome.model;
  return {};
}

void ClientConn::countAiRequest() {
  using metrics::AiOutcome;
  // cancelled: no answer, or the client left before the answer ended; failed: the engine's
  // answer broke off mid-body, or the gateway answered an error of its own.
  const AiOutcome o = rq_.outcome.status == 0 || client_gone_ ? AiOutcome::kCancelled
                      : rq_.outcome.denied                    ? AiOutcome::kDenied
                      : relay_cut_                            ? AiOutcome::kFailed
                      : rq_.outcome.engine_answered || rq_.outcome.status < 400
                          ? AiOutcome::kCompleted
                          : AiOutcome::kFailed;
  metrics::aiRequests().count(aiModelLabel(), rq_.outcome.tenant, rq_.outcome.status, o);
  if (rq_.trace.on) finishTrace();
  if (w_.stats.decisions.active()) {  // a dashboard watches: its live feed of decisions
    const Route* route = rq_.outcome.route;
    DecisionRecord d;
    d.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    d.request_id = DecisionFeed::cut(rq_.request_id);
    d.rule = DecisionFeed::cut(!route                     ? ""
                               : route->rule.name.empty() ? route->rule.key()
                                                          : route->rule.name);
    // (the model the pool lookup used, else the body's)
    d.model = DecisionFeed::cut(!rq_.outcome.model.empty() ? rq_.outcome.model
                                : rq_.body_has_model       ? std::string_view(rq_.body_model)
                                                           : std::string_view());
    if (rq_.outcome.endpoint) d.endpoint = DecisionFeed::cut(*rq_.outcome.endpoint);
    if (rq_.outcome.prefill) d.prefill = DecisionFeed::cut(*rq_.outcome.prefill);
    d.tier = DecisionFeed::cut(rq_.outcome.stage);
    d.key = DecisionFeed::cut(rq_.outcome.key);
    d.status = rq_.outcome.status;
    d.spilled = rq_.outcome.spilled;
    d.matched = rq_.outcome.matched_blocks;
    d.ttfb_ms = rq_.outcome.ttfb_ms;
    w_.stats.decisions.push(std::move(d));
  }
}

// One structured access-log line for the request just answered (--access-log). Every field is
// escaped by log::appendField, so client-controlled values cannot forge lines.
void ClientConn::logAccess() {
  const Route* route = rq_.outcome.route;
  std::string line = "access";
  log::appendField(line, "id", rq_.request_id);
  if (sink_) log::appendField(line, "proto", "h2");
  if (!rq_.upstream_id.empty()) log::appendField(line, "leg_id", rq_.upstream_id);
  log::appendField(line, "listener", l_->key);
  log::appendField(line, "rule",
                   !route                     ? ""
                   : route->rule.name.empty() ? route->rule.key()
                                              : route->rule.name);
  log::appendField(line, "model", rq_.outcome.model.substr(0, 256));  // client-chosen: bounded
  if (!rq_.outcome.tenant.empty())
    log::appendField(line, "tenant", rq_.outcome.tenant);  // governance
  if (!rq_.outcome.user.empty()) log::appendField(line, "user", rq_.outcome.user);
  if (!rq_.outcome.key_id.empty()) log::appendField(line, "api_key", rq_.outcome.key_id);
  if (rq_.outcome.quota_tokens >= 0)  // tokens the quota settlement charged
    log::appendField(line, "quota_tokens", std::to_string(rq_.outcome.quota_tokens));
  log::appendField(line, "endpoint", rq_.outcome.endpoint ? *rq_.outcome.endpoint : "");
  if (rq_.outcome.prefill) log::appendField(line, "prefill", *rq_.outcome.prefill);  // P/D
  log::appendField(line, "selector", route ? config::selectorName(route->rule.sel) : "");
  log::appendField(line, "tier", rq_.outcome.stage);
  log::appendField(line, "key", rq_.outcome.key);
  if (rq_.outcome.spilled) log::appendField(line, "spill", "1");
  log::appendField(line, "status", std::to_string(rq_.outcome.status));
  log::appendField(line, "bytes", std::to_string(rq_.outcome.bytes));
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", rq_.outcome.ttfb_ms < 0 ? 0.0 : rq_.outcome.ttfb_ms);
  log::appendField(line, "ttfb_ms", ms);
  std::snprintf(
      ms, sizeof ms, "%.3f",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - rq_.started_at)
          .count());
  log::appendField(line, "dur_ms", ms);
  log::info("proxy", line);
}

}  // namespace kvgate::proxy
