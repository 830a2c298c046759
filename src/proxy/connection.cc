// One client connection of the mode-4 fullproxy: request phases, upstream legs, relay.
//
// Per request: read the head (bounded, strict framing) -> read the body (Content-Length or
// chunked, bounded) -> find the model pool (X-Model header, else the body's "model") -> pick an
// endpoint with the rule's selector -> take a pooled keep-alive connection or connect (connect
// timeout, next endpoint on failure) -> send the head (hop-by-hop headers removed, X-Request-Id
// kept or injected) and the body -> relay the response as it arrives (SSE events flushed one by
// one, no idle reaping during a stream, a wall-clock cap) -> return the upstream connection to
// the pool. A client that disconnects mid-request closes the upstream connection so the engine
// aborts the request. One Deadline per connection bounds every phase.
#include <sys/socket.h>

#include "common/ids.h"
#include "common/log.h"
#include "http/chunked.h"
#include "http/parser.h"
#include "http/server.h"
#include "proxy/buffer.h"
#include "proxy/client_conn.h"
#include "proxy/request_info.h"
#include "proxy/request_keys.h"
#include "proxy/worker.h"
#include "routing/prefix_key.h"
#include "routing/selectors/hash_ring.h"

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

void ClientConn::onDeadline() {
  timed_out_ = true;
  switch (phase_) {
    case Phase::kHead:
    case Phase::kBody: {
      static const char k408[] =
          "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: "
          "close\r\nContent-Length: 116\r\n\r\n{\"error\":{\"message\":\"request header or body "
          "not received in time\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":"
          "\"timeout\"}}";
      ::send(client_.native_handle(), k408, sizeof(k408) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      l_->unrouted.inc(408);
      closeClient();
      break;
    }
    case Phase::kConnect:
    case Phase::kAwaitResponse:
      closeUpstream();
      break;
    default:
      closeUpstream();
      closeClient();
  }
}

asio::awaitable<bool> ClientConn::readMore(Buffer& b, tcp::socket& s) {
  error_code ec;
  size_t n = co_await s.async_read_some(b.prepare(kReadChunk), useEc(ec));
  if (ec || n == 0) co_return false;
  b.commit(n);
  co_return true;
}

asio::awaitable<bool> ClientConn::readUpstream() {
  // Fast path: one non-blocking recv. When the upstream makes us wait, watch the client and let
  // the reactor read (its edge-triggered read op cannot miss data that arrives meanwhile, which
  // a readiness wait could). After a wait, the next read goes straight to the reactor: a stream
  // keeps waiting, so the extra try would only cost a syscall.
  if (!upstream_waited_) {
    auto buf = up_.prepare(kReadChunk);
    ssize_t n = ::recv(upstream_.native_handle(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      up_.commit(static_cast<size_t>(n));
      co_return true;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) co_return false;
  }
  upstream_waited_ = true;
  if (!watch_running_ && !client_gone_) startWatch();
  co_return co_await readMore(up_, upstream_);
}

asio::awaitable<bool> ClientConn::writeClient(std::string_view a, std::string_view b) {
  error_code ec;
  std::array<asio::const_buffer, 2> bufs{asio::buffer(a.data(), a.size()),
                                         asio::buffer(b.data(), b.size())};
  co_await asio::async_write(client_, bufs, useEc(ec));
  co_return !ec;
}

asio::awaitable<void> ClientConn::sendError(int status, std::string_view code, std::string_view msg,
                                            std::string_view param, bool close) {
  if (close) client_keep_alive_ = false;
  std::string body = openAiError(status, code, msg, param);
  std::string h =
      "HTTP/1.1 " + std::to_string(status) + " " + http::statusReason(status) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n";
  if (!client_keep_alive_) h += "Connection: close\r\n";
  h += "\r\n";
  outcome_.status = status;
  countResponse(status);
  co_await writeClient(h, body);
}

// Counts the response once, under the most specific owner known: the endpoint, else the rule,
// else the listener (answers before routing).
void ClientConn::countResponse(int status) {
  if (outcome_.route && outcome_.ep_index >= 0)
    outcome_.route->ep_counters[static_cast<size_t>(outcome_.ep_index)]->inc(status);
  else if (outcome_.route)
    outcome_.route->stats->no_endpoint.inc(status);
  else
    l_->unrouted.inc(status);
}

void ClientConn::startWatch() {
  watching_ = true;
  watch_running_ = true;
  asio::co_spawn(client_.get_executor(), watchClient(shared_from_this(), ++watch_gen_),
                 asio::detached);
}

// Watches the client socket while the upstream makes us wait: EOF or an error means the client
// went away, so the upstream connection is closed and the engine aborts the request. Bytes of a
// pipelined request are kept for the next request. A stopped watcher (older generation) returns
// without touching the connection.
asio::awaitable<void> ClientConn::watchClient(std::shared_ptr<ClientConn> self, uint64_t gen) {
  char buf[4096];
  error_code ec;
  size_t n = co_await client_.async_read_some(asio::buffer(buf), useEc(ec));
  if (n > 0) pipelined_.append(buf, n);  // kept even if we were stopped meanwhile
  if (gen != watch_gen_ || !watching_) co_return;
  if (ec || n == 0) {
    client_gone_ = true;  // EOF or error: the client went away
    closeUpstream();      // the engine sees the disconnect and aborts the request
  }
  watch_running_ = false;
}

// Stops the watcher: cancels its read, then yields once so that its completion (cancelled, or
// holding pipelined bytes) runs before the connection reads the client again. Costs nothing when
// no watcher was started (the fast path).
asio::awaitable<void> ClientConn::stopWatch() {
  if (!watching_) co_return;
  watching_ = false;
  ++watch_gen_;
  if (!watch_running_) co_return;
  watch_running_ = false;
  error_code ec;
  client_.cancel(ec);
  co_await asio::post(client_.get_executor(), asio::use_awaitable);
}

// One structured access-log line for the request just answered (--access-log).
void ClientConn::logAccess(std::string_view request_id, std::string_view model) {
  const Route* route = outcome_.route;
  std::string line = "access";
  log::appendField(line, "id", request_id);
  log::appendField(line, "listener", l_->key);
  log::appendField(line, "rule",
                   !route                     ? ""
                   : route->rule.name.empty() ? route->rule.key()
                                              : route->rule.name);
  log::appendField(line, "model", model);
  log::appendField(line, "endpoint", outcome_.endpoint ? *outcome_.endpoint : "");
  log::appendField(line, "selector", route ? config::selectorName(route->rule.sel) : "");
  log::appendField(line, "key", outcome_.key);
  if (outcome_.spilled) log::appendField(line, "spill", "1");
  log::appendField(line, "status", std::to_string(outcome_.status));
  log::appendField(line, "bytes", std::to_string(outcome_.bytes));
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", outcome_.ttfb_ms < 0 ? 0.0 : outcome_.ttfb_ms);
  log::appendField(line, "ttfb_ms", ms);
  std::snprintf(
      ms, sizeof ms, "%.3f",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_at_)
          .count());
  log::appendField(line, "dur_ms", ms);
  log::info("proxy", line);
}

asio::awaitable<void> ClientConn::run() {
  auto self = shared_from_this();
  deadline_.start([self] { self->onDeadline(); });
  w_.stats.active_connections.fetch_add(1, std::memory_order_relaxed);
  {
    error_code ec;
    auto ep = client_.remote_endpoint(ec);
    std::string ip = ec ? std::string() : ep.address().to_string();
    source_key_ = routing::hashBytes(ip.data(), ip.size());
  }
  idle_timeout_ = w_.opts.client_idle_timeout;
  const auto& opts = w_.opts;

  while (client_.is_open()) {
    if (!pipelined_.empty()) {
      in_.append(pipelined_.data(), pipelined_.size());
      pipelined_.clear();
    }
    // ---- request head
    phase_ = in_.empty() ? Phase::kIdle : Phase::kHead;
    deadline_.expireAfter(in_.empty() ? idle_timeout_ : opts.header_timeout);
    http::RequestHead head;
    http::ParseError perr;
    int hn;
    while ((hn = http::parseRequestHead(in_.data(), in_.size(), opts.max_head_bytes, head, perr)) ==
           0) {
      bool was_empty = in_.empty();
      if (!co_await readMore(in_, client_)) goto done;
      if (was_empty) {
        phase_ = Phase::kHead;
        deadline_.expireAfter(opts.header_timeout);
      }
    }
    outcome_ = Outcome{};
    started_at_ = std::chrono::steady_clock::now();
    if (hn < 0) {
      co_await sendError(perr.status, "bad_request", perr.reason, {}, true);
      if (opts.access_log) logAccess("", "");
      break;
    }
    client_minor_ = head.version_minor;
    client_keep_alive_ = head.keep_alive;
    if (l_->closed.load()) {
      co_await sendError(503, "service_unavailable", "service removed", {}, true);
      break;
    }
    // ---- request body
    phase_ = Phase::kBody;
    const char* head_base = in_.data();
    size_t head_bytes = static_cast<size_t>(hn);
    std::string dechunked;
    bool chunked = head.body_kind == http::BodyKind::kChunked;
    size_t body_len = 0;
    if (head.body_kind == http::BodyKind::kLength) {
      if (head.content_length > opts.max_body_bytes) {
        co_await sendError(413, "request_too_large", "request body too large", {}, true);
        break;
      }
      body_len = head.content_length;
    }
    if (head.expect_continue && head.body_kind != http::BodyKind::kNone &&
        in_.size() == head_bytes) {
      if (!co_await writeClient("HTTP/1.1 100 Continue\r\n\r\n")) break;
    }
    if (chunked) {
      http::ChunkedScanner sc;
      size_t scanned = head_bytes;
      bool ok = true;
      for (;;) {
        auto st = sc.feed(in_.data() + scanned, in_.size() - scanned, &dechunked);
        scanned += st.consumed;
        if (st.error) {
          co_await sendError(400, "bad_request", "malformed chunked request body", {}, true);
          ok = false;
          break;
        }
        if (dechunked.size() > opts.max_body_bytes) {
          co_await sendError(413, "request_too_large", "request body too large", {}, true);
          ok = false;
          break;
        }
        if (st.done) break;
        if (!co_await readMore(in_, client_)) {
          ok = false;
          break;
        }
      }
      if (!ok) break;
      body_len = scanned - head_bytes;  // raw bytes to consume
    } else {
      while (in_.size() < head_bytes + body_len)
        if (!co_await readMore(in_, client_)) goto done;
    }
    // The buffer may have moved while reading the body: then parse the head again (cheap).
    if (in_.data() != head_base)
      http::parseRequestHead(in_.data(), in_.size(), opts.max_head_bytes, head, perr);
    std::string_view body =
        chunked ? std::string_view(dechunked) : std::string_view(in_.data() + head_bytes, body_len);
    deadline_.clear();

    // ---- request id
    char rid_buf[32];
    std::string_view rid = head.get("x-request-id");
    if (!isAcceptableRequestId(rid)) {
      newRequestId(rid_buf);
      rid = std::string_view(rid_buf, 32);
    }
    request_id_.assign(rid);
    const std::string& request_id = request_id_;

    // ---- routing
    auto cfg = l_->config.load();
    std::string_view target = head.target;
    std::string_view path = target.substr(0, target.find('?'));
    std::string_view host = hostWithoutPort(head.host);
    std::string model(head.get("x-model"));
    bool keep = true;
    body_keys_.reset();
    if (model.empty() && cfg->has_model_pools && !body.empty() && cfg->has_key_routes) {
      // Key-based rules parse the body anyway: once, for the model and the keys together.
      body_keys_ = routing::computeBodyKeys(body, opts.prefix_key_bytes);
      model = body_keys_->model;
      if (!body_keys_->json_ok) {
        co_await sendError(400, "invalid_json", "request body is not valid JSON");
        keep = false;
      }
    } else if (model.empty() && cfg->has_model_pools && !body.empty()) {
      if (extractModel(body, model) == BodyParse::kNotJson) {
        co_await sendError(400, "invalid_json", "request body is not valid JSON");
        keep = false;
      }
    }
    if (keep && head.method == "GET" && (path == "/v1/models" || path == "/models")) {
      auto names = cfg->models(host, path);
      if (!names.empty()) {
        std::string b = "{\"object\":\"list\",\"data\":[";
        for (size_t i = 0; i < names.size(); ++i) {
          if (i) b += ",";
          b += "{\"id\":\"" + http::jsonEscape(names[i]) +
               "\",\"object\":\"model\",\"created\":0,\"owned_by\":\"kvgate\"}";
        }
        b += "]}";
        std::string h =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: " + request_id +
            "\r\nContent-Length: " + std::to_string(b.size()) + "\r\n";
        if (!client_keep_alive_) h += "Connection: close\r\n";
        h += "\r\n";
        outcome_.status = 200;
        countResponse(200);
        co_await writeClient(h, b);
        keep = false;
      }
    }
    if (keep) {
      bool host_path_matched = false;
      const Route* route = cfg->find(host, path, model, host_path_matched);
      outcome_.route = route;
      if (!route) {
        if (host_path_matched)
          co_await sendError(503, "model_unavailable", "model '" + model + "' is not served here",
                             "model");
        else
          co_await sendError(404, "no_route", "no service for this host and path");
      } else if (!route->rule.inactive_capability.empty()) {
        co_await sendError(501, "not_active",
                           "capability '" + route->rule.inactive_capability +
                               "' is configured on this service but not active in this build",
                           route->rule.inactive_capability);
      } else if (!route->rule.admin_up) {
        co_await sendError(503, "service_down", "service is administratively down");
      } else {
        if (route->rule.inactive_timeout_sec > 0)
          idle_timeout_ = std::chrono::seconds(route->rule.inactive_timeout_sec);
        size_t consumed = head_bytes + body_len;
        bool ok = co_await proxyRequest(head, body, *route, request_id);
        if (ok) in_.consume(std::min(consumed, in_.size()));
        keep = false;
        if (!ok) client_keep_alive_ = false;
        if (opts.access_log) logAccess(request_id, model);
        if (!client_keep_alive_ || client_gone_) break;
        continue;
      }
    }
    if (opts.access_log) logAccess(request_id, model);
    in_.consume(std::min(head_bytes + body_len, in_.size()));
    if (!client_keep_alive_) break;
  }
done:
  w_.stats.active_connections.fetch_sub(1, std::memory_order_relaxed);
  deadline_.stop();
  co_await stopWatch();
  closeUpstream();
  if (client_.is_open() && !client_gone_) co_await lingeringClose(client_);
  closeClient();
}

asio::awaitable<bool> ClientConn::proxyRequest(const http::RequestHead& head, std::string_view body,
                                               const Route& route, std::string_view request_id) {
  const auto& rule = route.rule;
  const size_t n = route.endpoints.size();
  // Upstream request head: the client's, minus hop-by-hop headers, with our X-Request-Id.
  std::string& out = up_head_;  // reused across requests: no allocation once warm
  out.clear();
  out.append(head.method).append(" ").append(head.target).append(" HTTP/1.1\r\n");
  std::string_view conn_tokens = head.get("connection");
  for (size_t i = 0; i < head.num_headers; ++i) {
    auto& h = head.headers[i];
    if (http::isHopByHop(h.name) || http::iequals(h.name, "x-request-id") ||
        http::iequals(h.name, "expect") ||
        (head.body_kind == http::BodyKind::kChunked && http::iequals(h.name, "content-length")) ||
        (rule.strip_api_key && http::iequals(h.name, "x-api-key")) ||
        (!conn_tokens.empty() && http::headerHasToken(conn_tokens, h.name)))
      continue;
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  out.append("X-Request-Id: ").append(request_id).append("\r\n");
  const bool add_host = head.host.empty();  // an HTTP/1.0 client sent none; HTTP/1.1 needs one
  const size_t host_at = out.size();
  if (head.body_kind == http::BodyKind::kChunked)
    out.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  out.append("\r\n");
  const bool head_request = head.method == "HEAD";

  if (n == 0) {
    co_await sendError(503, "no_healthy_upstream", "service has no endpoints");
    co_return true;
  }
  auto connect_timeout =
      std::chrono::milliseconds(rule.timeout_connect_ms > 0 ? rule.timeout_connect_ms : 500);
  auto data_timeout = rule.timeout_data_ms > 0 ? std::chrono::milliseconds(rule.timeout_data_ms)
                                               : w_.opts.upstream_data_timeout;
  routing::RequestContext rctx =
      requestContext(head, body, route, source_key_, w_.opts.prefix_key_bytes,
                     body_keys_ ? &*body_keys_ : nullptr);
  std::vector<bool>& excluded = excluded_;
  excluded.assign(n, false);
  // Health pre-filter: endpoints probed down, passively marked down or behind an open breaker
  // leave every selector at once.
  const bool cb = rule.cb_enable;
  const auto& hopts = w_.opts.health;
  for (size_t i = 0; i < n; ++i) {
    const auto& h = route.endpoints[i].state->health;
    excluded[i] = !h.up() || (cb && h.breaker() == endpoints::BreakerState::kOpen);
  }
  std::string last_error = "no healthy endpoint";
  int fail_status = 503;
  for (size_t attempt = 0; attempt < 2 * n; ++attempt) {
    routing::PickInfo info;
    int idx = route.selector ? route.selector->pick(route.endpoints, excluded, rctx, info) : -1;
    if (idx < 0) break;
    bool trial = false;  // a half-open breaker's single trial request
    if (!route.endpoints[static_cast<size_t>(idx)].state->health.admits(cb, trial)) {
      excluded[static_cast<size_t>(idx)] = true;  // half-open with its trial already out
      continue;
    }
    outcome_.key = info.key;
    outcome_.ep_index = idx;
    for (size_t k = 0; k < kDecisionKeys.size(); ++k)
      if (std::string_view(kDecisionKeys[k]) == info.key)
        route.stats->decisions[k].fetch_add(1, std::memory_order_relaxed);
    if (info.spilled) {
      outcome_.spilled = true;
      route.stats->spills.fetch_add(1, std::memory_order_relaxed);
    }
    const auto& ep = route.endpoints[static_cast<size_t>(idx)];
    const auto& addr = route.addresses[static_cast<size_t>(idx)];
    outcome_.endpoint = &ep.state->label;
    if (add_host) {
      static constexpr std::string_view kHostName = "Host: ";
      if (out.compare(host_at, kHostName.size(), kHostName) == 0)
        out.erase(host_at, out.find("\r\n", host_at) + 2 - host_at);
      out.insert(host_at, std::string(kHostName) + ep.state->label + "\r\n");
    }
    // Up to two sends on this endpoint: a reused connection that turns out dead before any
    // response byte is replaced by a fresh one (nothing reached the engine).
    for (int send_try = 0; send_try < 2; ++send_try) {
      bool reused = send_try == 0 && w_.pool.take(ep.state->label, upstream_);
      if (!reused) {
        closeUpstream();
        upstream_ = tcp::socket(w_.io);
        phase_ = Phase::kConnect;
        timed_out_ = false;
        deadline_.expireAfter(connect_timeout);
        error_code ec;
        co_await upstream_.async_connect(addr, useEc(ec));
        deadline_.clear();
        if (ec || !upstream_.is_open()) {
          ep.state->connect_failures.fetch_add(1, std::memory_order_relaxed);
          ep.state->health.onConnectFailure(hopts, cb);
          last_error = "connect to " + ep.state->label +
                       " failed: " + (timed_out_ ? std::string("timeout") : ec.message());
          log::warn("proxy", last_error);
          fail_status = 502;
          closeUpstream();
          break;  // next endpoint
        }
        upstream_.set_option(tcp::no_delay(true), ec);
      }
      // Send the request.
      phase_ = Phase::kAwaitResponse;
      timed_out_ = false;
      deadline_.expireAfter(data_timeout);
      error_code ec;
      std::array<asio::const_buffer, 2> bufs{asio::buffer(out),
                                             asio::buffer(body.data(), body.size())};
      co_await asio::async_write(upstream_, bufs, useEc(ec));
      const auto sent_at = std::chrono::steady_clock::now();
      if (ec) {
        closeUpstream();
        if (reused) {  // stale pooled connection: once more on a fresh one
          log::debug("proxy", "pooled connection to " + ep.state->label +
                                  " failed on send; resending on a fresh one");
          continue;
        }
        last_error = "send to " + ep.state->label + " failed: " + ec.message();
        fail_status = 502;
        break;
      }
      ep.state->active.fetch_add(1, std::memory_order_relaxed);
      ep.state->requests.fetch_add(1, std::memory_order_relaxed);
      // Read the response head.
      up_.clear();
      upstream_waited_ = false;
      http::ResponseHead rh;
      http::ParseError perr;
      int hn = 0;
      bool got_bytes = false;
      while ((hn = http::parseResponseHead(up_.data(), up_.size(), 64 * 1024, head.method, rh,
                                           perr)) == 0) {
        if (!co_await readUpstream()) break;
        got_bytes = true;
      }
      if (hn > 0 && rh.status == 100) {  // interim 100 Continue from upstream: skip it
        up_.consume(static_cast<size_t>(hn));
        while ((hn = http::parseResponseHead(up_.data(), up_.size(), 64 * 1024, head.method, rh,
                                             perr)) == 0)
          if (!co_await readUpstream()) break;
      }
      if (hn <= 0) {
        co_await stopWatch();
        ep.state->active.fetch_sub(1, std::memory_order_relaxed);
        closeUpstream();
        if (client_gone_) {
          if (trial) ep.state->health.onTrialAbandoned();
          co_return false;
        }
        if (!(reused && !got_bytes && !timed_out_ && hn == 0))
          ep.state->health.onResponse(hopts, cb, timed_out_ ? 504 : 502, trial);
        else if (trial)
          ep.state->health.onTrialAbandoned();
        if (timed_out_) {
          co_await sendError(504, "upstream_timeout",
                             "upstream " + ep.state->label + " did not answer in time");
          co_return true;
        }
        if (hn < 0) {
          co_await sendError(502, "bad_upstream_response",
                             std::string("malformed response from upstream: ") + perr.reason);
          co_return true;
        }
        if (reused && !got_bytes) {  // closed while idle: send again on a fresh one
          log::debug("proxy", "pooled connection to " + ep.state->label +
                                  " closed before answering; resending on a fresh one");
          continue;
        }
        co_await sendError(502, "upstream_closed",
                           "upstream " + ep.state->label + " closed the connection");
        co_return true;
      }
      ep.state->health.onResponse(hopts, cb, rh.status, trial);
      route.stats->upstream_latency.observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - sent_at).count());
      bool ok = co_await relayResponse(rh, route, request_id, head_request);
      ep.state->active.fetch_sub(1, std::memory_order_relaxed);
      co_return ok;
    }
    excluded[static_cast<size_t>(idx)] = true;
  }
  co_await sendError(fail_status,
                     fail_status == 502 ? "upstream_connect_failed" : "no_healthy_upstream",
                     last_error);
  co_return true;
}

asio::awaitable<void> serveClient(Worker& w, std::shared_ptr<Listener> l, tcp::socket sock) {
  auto conn = std::make_shared<ClientConn>(w, std::move(l), std::move(sock));
  co_await conn->run();
}

asio::awaitable<void> acceptLoop(Worker& w, std::shared_ptr<Listener> l,
                                 std::shared_ptr<tcp::acceptor> acc) {
  while (acc->is_open()) {
    error_code ec;
    tcp::socket s = co_await acc->async_accept(useEc(ec));
    if (ec) {
      if (!acc->is_open() || ec == asio::error::operation_aborted) break;
      continue;
    }
    s.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(w.io, serveClient(w, l, std::move(s)), asio::detached);
  }
}

}  // namespace kvgate::proxy
