// The response relay of ClientConn: forwards the upstream's response head (hop-by-hop headers
// removed) and body as it arrives: Content-Length, chunked (scanned, relayed unchanged) or
// until-close; text/event-stream events are flushed one by one with no idle timeout, only the
// wall-clock cap max_stream_duration_sec. The upstream connection goes back to the pool when the
// response ended cleanly.
#include "common/log.h"
#include "http/chunked.h"
#include "http/server.h"
#include "proxy/client_conn.h"

namespace kvgate::proxy {

asio::awaitable<bool> ClientConn::relayResponse(const http::ResponseHead& rh, const Route& route,
                                                std::string_view request_id, bool head_request) {
  const auto& rule = route.rule;
  // Decide the framing towards the client.
  bool dechunk = rh.body_kind == http::BodyKind::kChunked && client_minor_ == 0;
  if (rh.body_kind == http::BodyKind::kUntilClose || dechunk) client_keep_alive_ = false;
  std::string& h = down_head_;
  h.clear();
  h.append("HTTP/1.1 ").append(std::to_string(rh.status)).append(" ");
  h.append(rh.reason.empty() ? std::string_view(http::statusReason(rh.status)) : rh.reason);
  h.append("\r\n");
  bool has_rid = false;
  for (size_t i = 0; i < rh.num_headers; ++i) {
    auto& x = rh.headers[i];
    if (http::isHopByHop(x.name)) continue;
    if (http::iequals(x.name, "x-request-id")) has_rid = true;
    h.append(x.name).append(": ").append(x.value).append("\r\n");
  }
  if (rh.body_kind == http::BodyKind::kChunked && !dechunk)
    h.append("Transfer-Encoding: chunked\r\n");
  if (!has_rid) h.append("X-Request-Id: ").append(request_id).append("\r\n");
  if (!client_keep_alive_) h.append("Connection: close\r\n");
  h.append("\r\n");
  outcome_.status = rh.status;
  countResponse(rh.status);
  up_.consume(rh.head_bytes);

  // Deadline: a stream gets a wall-clock cap and no idle reaping; other bodies a per-read timeout.
  const bool stream = rh.event_stream;
  struct StreamGauge {  // kvgate_active_streams while this response is a stream
    DataPlaneStats& s;
    bool on;
    ~StreamGauge() {
      if (on) s.active_streams.fetch_sub(1, std::memory_order_relaxed);
    }
  } stream_gauge{w_.stats, stream};
  if (stream) w_.stats.active_streams.fetch_add(1, std::memory_order_relaxed);
  bool ttft_pending = stream;
  auto data_timeout = rule.timeout_data_ms > 0 ? std::chrono::milliseconds(rule.timeout_data_ms)
                                               : w_.opts.upstream_data_timeout;
  if (stream) {
    int64_t cap = rule.max_stream_duration_sec > 0 ? rule.max_stream_duration_sec : 86400;
    phase_ = Phase::kStream;
    deadline_.expireAfter(std::chrono::seconds(cap));
  } else {
    phase_ = Phase::kRelay;
  }

  http::ChunkedScanner sc;
  uint64_t remaining = rh.body_kind == http::BodyKind::kLength ? rh.content_length : 0;
  bool complete = rh.body_kind == http::BodyKind::kNone || head_request;
  bool upstream_reusable = rh.keep_alive;
  std::string decoded;
  bool first = true;
  for (;;) {
    // Forward what we have.
    std::string_view chunk;
    if (!complete && !up_.empty()) {
      switch (rh.body_kind) {
        case http::BodyKind::kLength: {
          size_t take = static_cast<size_t>(std::min<uint64_t>(remaining, up_.size()));
          chunk = std::string_view(up_.data(), take);
          remaining -= take;
          complete = remaining == 0;
          break;
        }
        case http::BodyKind::kChunked: {
          decoded.clear();
          auto st = sc.feed(up_.data(), up_.size(), dechunk ? &decoded : nullptr);
          if (st.error) {
            log::warn("proxy", "malformed chunked response from " + *outcome_.endpoint);
            if (first) co_await writeClient(h);  // then cut the stream: the client sees it
            co_await stopWatch();
            closeUpstream();
            co_return false;
          }
          chunk = dechunk ? std::string_view(decoded) : std::string_view(up_.data(), st.consumed);
          complete = st.done;
          if (st.done && st.consumed != up_.size()) upstream_reusable = false;
          // Released now; `chunk` still points at the bytes until the next read.
          up_.consume(st.consumed);
          break;
        }
        case http::BodyKind::kUntilClose:
          chunk = up_.view();
          break;
        case http::BodyKind::kNone:
          break;
      }
    }
    if (first || !chunk.empty()) {
      bool ok = co_await writeClient(first ? std::string_view(h) : std::string_view(), chunk);
      if (outcome_.ttfb_ms < 0 || (ttft_pending && !chunk.empty()))
        outcome_.ttfb_ms = std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - started_at_)
                               .count();
      if (ttft_pending && !chunk.empty()) {
        ttft_pending = false;
        route.stats->stream_ttft.observe(outcome_.ttfb_ms / 1000.0);
      }
      outcome_.bytes += chunk.size();
      first = false;
      if (!ok) {
        closeUpstream();  // client gone: abort the upstream request
        client_gone_ = true;
        co_await stopWatch();
        co_return false;
      }
    }
    // Release what was forwarded (chunked consumed it already).
    if (rh.body_kind == http::BodyKind::kLength || rh.body_kind == http::BodyKind::kUntilClose)
      up_.consume(chunk.size());
    if (complete) break;
    if (!stream) deadline_.expireAfter(data_timeout);
    if (!co_await readUpstream()) {
      if (rh.body_kind == http::BodyKind::kUntilClose && !client_gone_ && !timed_out_) {
        complete = true;
        upstream_reusable = false;
        break;
      }
      // Truncated by the upstream, the deadline or a client disconnect: cut the client stream.
      if (timed_out_ && stream)
        log::warn("proxy", "stream " + std::string(request_id) + " hit max_stream_duration_sec");
      co_await stopWatch();
      closeUpstream();
      co_return false;
    }
  }
  deadline_.clear();
  co_await stopWatch();
  if (client_gone_) {
    closeUpstream();
    co_return false;
  }
  if (upstream_reusable && up_.empty() && upstream_.is_open())
    w_.pool.put(*outcome_.endpoint, std::move(upstream_));
  else
    closeUpstream();
  upstream_ = tcp::socket(w_.io);
  co_return true;
}

}  // namespace kvgate::proxy
