// Exchange plumbing: the deadline's actions, the gateway's own answers (errors in the request's
// API shape), response counting, loxilb_ai_requests_total, the decision feed and the access log.
#include "common/log.h"
#include "engines/anthropic_messages.h"
#include "http/server.h"
#include "proxy/exchange.h"

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
std::string Exchange::errorBody(int status, std::string_view code, std::string_view message,
                                std::string_view param) const {
  if (rq_.api != Api::kMessages && rq_.api != Api::kCountTokens)
    return openAiError(status, code, message, param);
  return engines::anthropic::errorBody(engines::anthropic::errorType(status), message);
}

void Exchange::onDeadline() {
  switch (phase_) {
    case Phase::kHead:
    case Phase::kBody: {
      client_->requestTimedOut();  // (HTTP/1.x over plain TCP: a 408)
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

asio::awaitable<void> Exchange::sendError(int status, std::string_view code, std::string_view msg,
                                          std::string_view param, bool close,
                                          int64_t retry_after_s) {
  if (close) client_->closeAfter();
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

asio::awaitable<bool> Exchange::writeAnswer(std::string_view body) {
  // (a HEAD request's answer has the head only: its Content-Length is the body it would have;
  // 204 and 304 have none)
  if (rq_.head_method || own_fields_.status == 204 || own_fields_.status == 304) body = {};
  const HeadFields& h = own_fields_;
  if (client_->multiplexed()) {
    if (!client_->writeHead(h)) co_return false;
    co_return co_await client_->write({}, body);
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
  if (!client_->keepAlive()) t.append("Connection: close\r\n");
  t.append("\r\n");
  co_return co_await writeClient(t, body);
}

// Counts the response once, under the most specific owner known: the endpoint, else the rule,
// else the listener (answers before routing).
void Exchange::countResponse(int status) {
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
void Exchange::onUpstreamWait() { watch_wanted_ = true; }

// Deadline tick (no expiry; also a wake-up because the deadline moved earlier): the client side
// starts watching the client if a request still waits on its upstream (HTTP/1.x: unless its
// watcher already holds the bound of pipelined bytes; then TCP pushes back on the client).
void Exchange::onTick() {
  if (!watch_wanted_ || client_gone_) return;
  if (phase_ != Phase::kConnect && phase_ != Phase::kAwaitResponse && phase_ != Phase::kRelay &&
      phase_ != Phase::kStream)
    return;
  client_->watch();
}

// The model label of loxilb_ai_requests_total and loxilb_ai_active_streams: the rule's
// model_name when it has one; else the request's model once a credential was admitted (engines
// such as llama.cpp or SGLang answer any model name, so an answer vouches for nothing); else "".
// Anonymous clients on a catch-all rule cannot fill the bounded label set.
std::string_view Exchange::aiModelLabel() const {
  if (rq_.outcome.route && !rq_.outcome.route->rule.model_name.empty())
    return rq_.outcome.route->rule.model_name;
  if (!rq_.outcome.key_id.empty() || !rq_.outcome.tenant.empty() || !rq_.outcome.user.empty())
    return rq_.outcome.model;
  return {};
}

void Exchange::countAiRequest() {
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
void Exchange::logAccess() {
  const Route* route = rq_.outcome.route;
  std::string line = "access";
  log::appendField(line, "id", rq_.request_id);
  if (const std::string_view proto = client_->protoName(); !proto.empty())
    log::appendField(line, "proto", proto);
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
