// The response relay of an Exchange: forwards the upstream's response head (hop-by-hop headers
// removed) and body as it arrives: Content-Length, chunked (scanned, relayed unchanged) or
// until-close; text/event-stream events are flushed one by one with no idle timeout, only the
// wall-clock cap max_stream_duration_sec. The upstream connection goes back to the pool only when
// the response ended cleanly and no byte beyond it arrived.
#include "common/log.h"
#include "http/chunked.h"
#include "http/server.h"
#include "proxy/exchange.h"
#include "proxy/filters/response_filter.h"

namespace kvgate::proxy {
namespace {

// The response filters running on one answer (no allocation: there are only a few).
struct RunningFilters {
  static constexpr size_t kMax = kMaxResponseFilters;  // (a test holds the chain to it)
  const ResponseFilter* f[kMax] = {};
  size_t n = 0;
  const ResponseFilter* rewriter = nullptr;  // (at most one: the first that rewrites)
  void add(const ResponseFilter* filter) {
    if (n == kMax || (filter->rewrites() && rewriter)) return;
    if (filter->rewrites()) rewriter = filter;
    f[n++] = filter;
  }
  void drop(size_t i) {
    for (; i + 1 < n; ++i) f[i] = f[i + 1];
    --n;
  }
};

}  // namespace

// The upstream's fields the client gets, in order: hop-by-hop ones (and those its Connection
// names), the rule's own HSTS, a repeated Content-Length and, when `rewrite`, Content-Length
// removed; the engine's X-Request-Id too when the legs had their own id.
// True when one X-Request-Id was kept (none is to be added).
template <class Add>
bool Exchange::downstreamFields(const http::ResponseHead& rh, bool rewrite, Add&& add) const {
  bool has_rid = false, has_length = false;
  const bool hsts = !ruleHeaders().empty();
  const std::string_view connection = rh.get("connection");  // (the fields it names are hop-by-hop)
  for (size_t i = 0; i < rh.num_headers; ++i) {
    auto& x = rh.headers[i];
    if (http::isHopByHop(x.name)) continue;
    if (!connection.empty() && http::headerHasToken(connection, x.name)) continue;
    if (http::iequals(x.name, "content-length")) {  // (repeats of one value: one, RFC 9110 §8.6)
      if (has_length) continue;
      has_length = true;
    }
    if (hsts && http::iequals(x.name, "strict-transport-security")) continue;  // ours
    if (rewrite && http::iequals(x.name, "content-length")) continue;
    if (http::iequals(x.name, "x-request-id")) {
      if (!rq_.upstream_id.empty()) continue;  // the engines saw the legs' id; the client its own
      has_rid = true;
    }
    add(x.name, x.value);
  }
  return has_rid;
}

void Exchange::buildDownstreamHead(const http::ResponseHead& rh, bool dechunk, bool rewrite) {
  std::string& h = down_head_;
  h.clear();
  h.append("HTTP/1.1 ").append(std::to_string(rh.status)).append(" ");
  h.append(rh.reason.empty() ? std::string_view(http::statusReason(rh.status)) : rh.reason);
  h.append("\r\n");
  const bool has_rid = downstreamFields(rh, rewrite, [&](std::string_view n, std::string_view v) {
    h.append(n).append(": ").append(v).append("\r\n");
  });
  if (rewrite ? !client_->payloadOnly() : rh.body_kind == http::BodyKind::kChunked && !dechunk)
    h.append("Transfer-Encoding: chunked\r\n");
  if (!has_rid) h.append("X-Request-Id: ").append(rq_.request_id).append("\r\n");
  h.append(ruleHeaders());
  if (!client_->keepAlive()) h.append("Connection: close\r\n");
  h.append("\r\n");
}

// The same head as fields for a multiplexed stream (client_side.h): no framing fields (the
// stream frames the payload itself), no Connection.
void Exchange::buildDownstreamFields(const http::ResponseHead& rh, bool rewrite) {
  HeadFields& h = down_fields_;
  h.clear();
  h.status = rh.status;
  const bool has_rid = downstreamFields(rh, rewrite, [&](std::string_view n, std::string_view v) {
    h.add(n, v);  // (isHopByHop covers proxy-connection too)
  });
  if (!has_rid) h.add("x-request-id", rq_.request_id);
  addRuleHeaders(h);
}

void Exchange::addRuleHeaders(HeadFields& h) const {
  // ("Name: value" lines, HSTS on TLS rules)
  for (std::string_view rest = ruleHeaders(); !rest.empty();) {
    const size_t eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    h.add(line.substr(0, colon), value);
  }
}

// Splits the next piece of the response body off the leg's buffer, by the upstream's framing.
// False when a chunked body is malformed.
bool Exchange::nextChunk(RelayFraming& f, std::string_view& chunk) {
  Buffer& up = leg_.buf();
  chunk = {};
  if (f.complete || up.empty()) return true;
  switch (f.kind) {
    case http::BodyKind::kLength: {
      size_t take = static_cast<size_t>(std::min<uint64_t>(f.remaining, up.size()));
      chunk = std::string_view(up.data(), take);
      f.remaining -= take;
      f.complete = f.remaining == 0;
      break;
    }
    case http::BodyKind::kChunked: {
      f.decoded.clear();
      auto st = f.sc.feed(up.data(), up.size(), f.dechunk || f.decode ? &f.decoded : nullptr);
      if (st.error) return false;
      chunk = f.dechunk ? std::string_view(f.decoded) : std::string_view(up.data(), st.consumed);
      f.complete = st.done;
      if (st.done && st.consumed != up.size()) f.reusable = false;  // bytes beyond the response
      up.consume(st.consumed);  // released now; `chunk` still points at the bytes until a read
      break;
    }
    case http::BodyKind::kUntilClose:
      chunk = up.view();
      break;
    case http::BodyKind::kNone:
      break;
  }
  return true;
}

// A re-framed piece (rq_.quota.inject): one chunk for an HTTP/1.1 client (`last`: and the final
// zero-size chunk), the bytes themselves for an HTTP/1.0 one (its body ends at the close).
std::string_view Exchange::frameRewritten(std::string& piece, bool last) {
  if (client_->payloadOnly()) return piece;
  if (!piece.empty()) {
    char size[24];
    const int n = std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    piece.insert(0, size, size_t(n));
    piece += "\r\n";
  }
  if (last) piece += "0\r\n\r\n";
  return piece;
}

// Time to first byte (and, for a stream, to its first event) of the response being relayed.
void Exchange::noteFirstBytes(const Route& route, bool& ttft_pending, bool had_payload) {
  if (rq_.outcome.ttfb_ms >= 0 && !(ttft_pending && had_payload)) return;
  rq_.outcome.ttfb_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - rq_.started_at)
          .count();
  if (ttft_pending && had_payload) {
    ttft_pending = false;
    route.stats->stream_ttft.observe(rq_.outcome.ttfb_ms / 1000.0);
  }
}

// A stream can last minutes: once its request was sent, the client buffer is freed when it holds
// nothing but that request (memory per open stream). The only view into it still read later, the
// model for the access log, is copied first; run() then consumes nothing.
void Exchange::releaseRequestBytes() {
  if (!client_->requestReleasable()) return;  // pipelined bytes follow: keep them
  rq_.model_copy.assign(rq_.outcome.model);
  rq_.outcome.model = rq_.model_copy;
  client_->releaseRequest();
  stream_in_.clear();  // (a stream's: runStream)
  stream_in_.shrinkIfEmpty(0);
}

// Ends a relay that cannot complete: the upstream connection is closed, never pooled.
bool Exchange::abandonRelay(RelayCut why) {
  relay_cut_ = true;
  w_.stats.relay_cuts[static_cast<size_t>(why)].fetch_add(1, std::memory_order_relaxed);
  if (why == RelayCut::kUpstream && rq_.outcome.endpoint)
    log::warn("proxy", "response " + rq_.request_id + " from " + *rq_.outcome.endpoint +
                           " cut by the upstream after " + std::to_string(rq_.outcome.bytes) +
                           " bytes: the client's " + (rq_.quota.stream ? "stream" : "body") +
                           " ends unfinished");
  stopWatch();
  leg_.release(false);
  return false;
}

asio::awaitable<bool> Exchange::relayResponse(const http::ResponseHead& rh, const Route& route,
                                              bool head_request, endpoints::EndpointLease& lease) {
  const auto& rule = route.rule;
  RelayFraming f;
  f.kind = rh.body_kind;
  const bool mux = client_->multiplexed();
  f.dechunk = rh.body_kind == http::BodyKind::kChunked && client_->payloadOnly();
  f.remaining = rh.body_kind == http::BodyKind::kLength ? rh.content_length : 0;
  f.complete = rh.body_kind == http::BodyKind::kNone || head_request;
  f.reusable = rh.keep_alive;
  // The response filters (filters/response_filter.h) that run on this answer: they read the
  // payload de-chunked; one may rewrite it (a metered stream without the usage the gateway asked
  // for: re-framed, chunked to HTTP/1.1 clients, until close to HTTP/1.0 ones).
  const ResponseEnv env{rq_, route, rh, head_request};
  RunningFilters run;
  for (const ResponseFilter* filter : responseFilters())
    if (filter->begin(env)) run.add(filter);
  const bool rewrite = run.rewriter != nullptr;
  f.decode = run.n > 0;
  rq_.quota.status = rh.status;
  rq_.quota.stream = rh.event_stream;
  if (!mux && (rh.body_kind == http::BodyKind::kUntilClose || f.dechunk ||
               (rewrite && client_->payloadOnly())))
    client_->closeAfter();  // (HTTP/1.x: the body ends at the close)
  if (mux)
    buildDownstreamFields(rh, rewrite);  // (a stream takes the head as fields)
  else
    buildDownstreamHead(rh, f.dechunk, rewrite);
  rq_.outcome.status = rh.status;
  rq_.outcome.engine_answered = true;
  countResponse(rh.status);
  leg_.consumeHead(rh);

  // Deadline: a stream gets a wall-clock cap and no idle reaping; other bodies a per-read timeout.
  const bool stream = rh.event_stream;
  if (stream) rq_.trace.event_stream = true;  // (its first byte is the first token's)
  // kvgate_active_streams and the endpoint's kvgate_endpoint_active_streams while this response
  // is a stream (the endpoint's state lives as long as the request's route snapshot)
  endpoints::EndpointState* ep_state =
      stream && rq_.outcome.ep_index >= 0 &&
              static_cast<size_t>(rq_.outcome.ep_index) < route.endpoints.size()
          ? route.endpoints[static_cast<size_t>(rq_.outcome.ep_index)].state.get()
          : nullptr;
  struct StreamGauge {
    DataPlaneStats& s;
    endpoints::EndpointState* ep;
    bool on;
    ~StreamGauge() {
      if (!on) return;
      s.active_streams.fetch_sub(1, std::memory_order_relaxed);
      if (ep) ep->active_streams.fetch_sub(1, std::memory_order_relaxed);
    }
  } stream_gauge{w_.stats, ep_state, stream};
  metrics::StreamHold model_streams;  // loxilb_ai_active_streams{model}
  if (stream) {
    w_.stats.active_streams.fetch_add(1, std::memory_order_relaxed);
    if (ep_state) ep_state->active_streams.fetch_add(1, std::memory_order_relaxed);
    model_streams.open(metrics::aiRequests(), aiModelLabel());
  }
  bool ttft_pending = stream;
  const auto data_timeout = dataTimeout(rule);
  phase_ = stream ? Phase::kStream : Phase::kRelay;
  if (stream) {
    deadline_.expireAfter(std::chrono::seconds(
        rule.max_stream_duration_sec > 0 ? rule.max_stream_duration_sec : 86400));
    releaseRequestBytes();
    leg_.keepReadRoomSmall();
    std::string().swap(rq_.up_head);  // (a stream lasts: its request head is not kept meanwhile)
  }

  for (bool first = true;; first = false) {
    std::string_view chunk;
    if (!nextChunk(f, chunk)) {
      log::warn("proxy", "malformed chunked response from " + *rq_.outcome.endpoint);
      if (first) {  // then cut the stream: the client sees it
        if (mux)
          client_->writeHead(down_fields_);
        else
          co_await writeClient(down_head_);
      }
      co_return abandonRelay(RelayCut::kMalformed);
    }
    // The engine is past this request's prefill; only a successful event stream's first byte
    // times it (an error answers at once: no prefill rate sample).
    if (!chunk.empty() && lease.prefillPending())  // (the clock is read once a stream)
      lease.prefillDone(rh.status < 300 && stream ? nowNs() : -1);
    if (!chunk.empty() && stream && rh.status < 300) lease.markStarted();
    std::string_view out = chunk;  // what the client gets of this piece
    if (run.n > 0 && !chunk.empty()) {
      const std::string_view payload =
          f.kind == http::BodyKind::kChunked ? std::string_view(f.decoded) : chunk;
      if (rewrite) rq_.relay_out.clear();
      for (size_t i = 0; i < run.n;) {
        const ResponseFilter* filter = run.f[i];
        const bool more =
            filter->payload(env, payload, filter == run.rewriter ? &rq_.relay_out : nullptr);
        if (more || filter == run.rewriter)  // (the rewriter sees every piece)
          ++i;
        else
          run.drop(i);
      }
      if (rewrite) out = frameRewritten(rq_.relay_out, false);
      // Nobody reads the payload any more: no decoding for them, and a sockMapMode body may go to
      // the kernel (before the filters, only a Responses API id found ended decoding; a checked
      // /tokenize answer over its capture bound kept it to the end, for nobody).
      if (run.n == 0) f.decode = false;
    }
    if (first || !out.empty()) {
      // Written on the spot when the socket takes it all (no coroutine frame): this runs once per
      // relayed read, i.e. for every SSE event.
      const std::string_view head = first ? std::string_view(down_head_) : std::string_view();
      size_t written = 0;
      error_code wec;
      if (mux) {
        // (statements, not one expression: no co_await inside a short-circuit)
        bool sent = !first || client_->writeHead(down_fields_);
        if (sent) sent = co_await client_->write(std::string_view(), out);
        if (!sent) wec = asio::error::broken_pipe;
      } else if (!client_->writeNow(head, out, written, wec)) {
        wec = co_await client_->writeRest(head, out, written);
      }
      bool ok = !wec;
      if (first && stream) {  // (written: not kept while it lasts)
        std::string().swap(down_head_);
        down_fields_.release();
      }
      noteFirstBytes(route, ttft_pending, !chunk.empty());
      rq_.outcome.bytes += out.size();
      if (!ok) {
        client_gone_ = true;  // client gone: abort the upstream request
        co_return abandonRelay(RelayCut::kClient);
      }
    }
    // Release what was forwarded (chunked consumed it already).
    if (f.kind == http::BodyKind::kLength || f.kind == http::BodyKind::kUntilClose)
      leg_.buf().consume(chunk.size());
    // An event stream waits between events holding no decoded piece (an HTTP/2 client's stream
    // gets the payload de-chunked for every event; a malloc an event against a few hundred bytes
    // held by each of thousands of idle streams).
    if (stream && f.decoded.capacity() > std::string().capacity()) std::string().swap(f.decoded);
    if (f.complete) break;
    // sockMapMode: the rest of the body in the kernel (relay_sockmap.cc).
    if (spliceWanted(f, route, stream, head_request)) {
      RelayCut why{};
      const int spliced = co_await spliceBody(f, route, why);
      if (spliced < 0) co_return abandonRelay(why);
    }
    if (f.complete) break;
    if (!stream) deadline_.expireAfter(data_timeout);
    if (!co_await leg_.readBody()) {
      if (f.kind == http::BodyKind::kUntilClose && !client_gone_ && !leg_.timedOut() &&
          leg_.cleanEof()) {
        f.reusable = false;  // the close ended the body: complete
        break;
      }
      // Truncated by the upstream, the deadline or a client disconnect: cut the client stream.
      if (leg_.timedOut() && stream)
        log::warn("proxy", "stream " + rq_.request_id + " hit max_stream_duration_sec");
      co_return abandonRelay(client_gone_       ? RelayCut::kClient
                             : leg_.timedOut() ? RelayCut::kTimeout
                                               : RelayCut::kUpstream);
    }
  }
  if (rewrite) {  // what the filter still holds, and the end of the re-framed body
    rq_.relay_out.clear();
    run.rewriter->finish(env, rq_.relay_out);
    const std::string_view tail = frameRewritten(rq_.relay_out, true);
    if (!tail.empty()) {  // (co_await as a statement of its own: see the first write above)
      const bool sent = co_await writeClient(tail);
      if (!sent) client_gone_ = true;
    }
  }
  deadline_.clear();
  stopWatch();
  if (client_gone_) {
    leg_.release(false);
    co_return false;
  }
  for (size_t i = 0; i < run.n; ++i) run.f[i]->end(env);
  // Pooled only when the exchange is complete and nothing else arrived (the leg checks).
  leg_.release(f.reusable);
  co_return true;
}

}  // namespace kvgate::proxy
