// Forwarding one request: the rule's routing pipeline picks an endpoint, an UpstreamLeg carries
// the exchange, and failures move on as the rules below say.
//
// Candidates: endpoints probed down, passively marked down or behind an open breaker are masked
// before any stage runs; a half-open breaker admits one trial (EndpointLease carries it). The
// pick takes an EndpointLease at once: the endpoint's in-flight count rises from the moment of
// the pick (during connect too) and falls on every path.
// Failures: a connect failure moves to the next endpoint (the stage runs again without it); a
// reused pooled connection that fails or closes before any response byte is replaced by a fresh
// connection and the request sent again (nothing reached the engine); any other failure is
// answered 502/504 and teaches the breaker. Interim 1xx answers (not 101) are relayed to
// HTTP/1.1 clients and dropped for HTTP/1.0 clients; the final response follows.
#include "common/log.h"
#include "engines/openai_responses.h"
#include "proxy/exchange.h"
#include "proxy/remote_hint.h"
#include "proxy/request_keys.h"

namespace kvgate::proxy {

void Exchange::buildUpstreamHead(const Request& req, const Route& route, std::string_view body,
                                 std::string& out, size_t& host_at, bool identity,
                                 const char* leg_role) {
  const auto& head = req.head;
  out.clear();  // reused across requests: no allocation once warm (a stream frees it)
  out.append(head.method).append(" ").append(head.target).append(" HTTP/1.1\r\n");
  std::string_view conn_tokens = head.get("connection");
  // The length is ours to write when the client's body was chunked or is not what is sent.
  const bool own_length =
      head.body_kind == http::BodyKind::kChunked || body.data() != req.body.data();
  for (size_t i = 0; i < head.num_headers; ++i) {
    auto& h = head.headers[i];
    if (http::isHopByHop(h.name) || http::iequals(h.name, "x-request-id") ||
        http::iequals(h.name, "expect") ||
        (own_length && http::iequals(h.name, "content-length")) ||
        (route.rule.strip_api_key && http::iequals(h.name, "x-api-key")) ||
        (rq_.strip_authorization && http::iequals(h.name, "authorization")) ||
        (identity && http::iequals(h.name, "accept-encoding")) ||
        (!conn_tokens.empty() && http::headerHasToken(conn_tokens, h.name)) ||
        (rq_.trace.propagate && isTraceHeader(h.name)))  // (our traceparent replaces it)
      continue;
    out.append(h.name).append(": ").append(h.value).append("\r\n");
  }
  if (rq_.trace.propagate)
    out.append(rq_.trace.legHeaders(leg_role, std::chrono::steady_clock::now()));
  out.append("X-Request-Id: ")
      .append(rq_.upstream_id.empty() ? rq_.request_id : rq_.upstream_id)
      .append("\r\n");
  if (identity) out.append("Accept-Encoding: identity\r\n");
  // An HTTP/1.0 client may send no Host; HTTP/1.1 upstreams need one (setUpstreamHost).
  host_at = head.host.empty() ? out.size() : std::string::npos;
  if (own_length) out.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
  out.append("\r\n");
}

void Exchange::setUpstreamHost(std::string& head, size_t host_at, std::string_view label) {
  if (host_at == std::string::npos) return;
  static constexpr std::string_view kHostName = "Host: ";
  if (head.compare(host_at, kHostName.size(), kHostName) == 0)
    head.erase(host_at, head.find("\r\n", host_at) + 2 - host_at);
  head.insert(host_at, std::string(kHostName).append(label).append("\r\n"));
}

void Exchange::filterCandidates(const Route& route, std::vector<bool>& excluded, int role,
                                bool draining) const {
  route.eligibility.apply(route.endpoints, {nowNs(), role, draining}, excluded,
                          &route.stats->eligibility);
}

int64_t Exchange::nowNs() const {
  return w_.opts.clock ? w_.opts.clock->nowNs() : common::SteadyClock::instance().nowNs();
}

// Reads the final response head, relaying interim 1xx answers to HTTP/1.1 clients.
asio::awaitable<UpstreamLeg::Result> Exchange::readFinalHead(std::string_view method,
                                                             http::ResponseHead& rh) {
  for (;;) {
    UpstreamLeg::Result r = co_await leg_.readHead(method, rh);
    if (!r.ok() || !r.interim) co_return r;
    // 100 Continue answered our own Expect handling (we strip Expect): not the client's.
    if (!client_->payloadOnly() && rh.status != 100) {
      if (!co_await writeClient(std::string_view(leg_.buf().data(), rh.head_bytes))) {
        client_gone_ = true;
        leg_.abort(false);
        r.outcome = UpstreamLeg::Outcome::kClosed;
        r.retry_safe = false;
        r.error = "client went away";
        co_return r;
      }
    }
    leg_.consumeHead(rh);
  }
}

// The gateway's answer when an exchange failed after the request may have reached the engine.
asio::awaitable<bool> Exchange::failExchange(const UpstreamLeg::Result& r, const Route& route,
                                             size_t idx, endpoints::EndpointLease& lease) {
  stopWatch();
  leg_.release(false);
  if (client_gone_) co_return false;  // the lease releases an unsettled trial
  if (!rq_.sibling_failure.empty()) {  // another leg failed: this one's endpoint is not to blame
    co_await answerSiblingFailure();
    co_return true;
  }
  const bool cb = route.rule.cb_enable;
  const auto& label = route.endpoints[idx].state->label;
  using O = UpstreamLeg::Outcome;
  if (r.outcome == O::kTimeout) {
    lease.settle(route.health, cb, 504);
    co_await sendError(504, "upstream_timeout",
                       "upstream " + label + " did not answer in time" + rq_.leg_note);
  } else if (r.outcome == O::kBadResponse) {
    lease.settle(route.health, cb, 502);
    co_await sendError(502, "bad_upstream_response", r.error + rq_.leg_note);
  } else {
    lease.settle(route.health, cb, 502);
    co_await sendError(502, "upstream_closed",
                       "upstream " + label + " closed the connection" + rq_.leg_note);
  }
  co_return true;
}

// A new connection to route endpoint `idx` on `leg`. A socket the gateway cannot make for want of
// descriptors or memory is the gateway's shortage, not the engine's: counted
// (kvgate_upstream_socket_failures_total), tried again every 100 ms for up to 1 s while the
// client stays, and reported with Result::starved set so the caller neither blames the endpoint
// nor moves on to the next one (which would fail the same way).
asio::awaitable<UpstreamLeg::Result> Exchange::connectLeg(UpstreamLeg& leg, const Route& route,
                                                          size_t idx) {
  const auto& ep = route.endpoints[idx];
  for (int attempt = 0;; ++attempt) {
    phase_ = Phase::kConnect;
    deadline_.expireAfter(connectTimeout(route.rule));
    auto r = co_await leg.connect(ep.state->id, route.addresses[idx], ep.state->label,
                                  route.backend_tls.get(), route.tls_names[idx], route.backend);
    deadline_.clear();
    if (!r.starved || client_gone_) co_return r;
    if (attempt == 0)  // (once per connect that found none)
      w_.stats.upstream_socket_failures[r.starved - 1].fetch_add(1, std::memory_order_relaxed);
    if (attempt == kStarvedConnectTries - 1) co_return r;
    asio::steady_timer pause(w_.io, std::chrono::milliseconds(100));
    error_code ec;
    co_await pause.async_wait(useEc(ec));
    // The client left, or another leg of the request failed meanwhile: stop here.
    if (client_gone_ || !rq_.sibling_failure.empty()) co_return r;
  }
}

// One endpoint: up to two sends (a stale pooled connection is replaced once by a fresh one).
// `next_endpoint` is set when the caller should try another endpoint.
asio::awaitable<bool> Exchange::exchange(const Request& req, std::string_view body,
                                         const Route& route, size_t idx,
                                         endpoints::EndpointLease& lease, bool& next_endpoint) {
  const auto& rule = route.rule;
  const auto& ep = route.endpoints[idx];
  const bool cb = rule.cb_enable;
  const auto data_timeout = dataTimeout(rule);
  next_endpoint = false;
  for (int send_try = 0; send_try < 2; ++send_try) {
    UpstreamLeg::Result r;
    // The client left (an HTTP/2 stream reset while the request was routed): nothing is sent.
    if (client_gone_) co_return false;
    if (!rq_.sibling_failure.empty())  // another leg failed before this one started
      co_return co_await failExchange(r, route, idx, lease);
    // (a retry: a fresh connection for HTTP/1.1; for HTTP/2 a connection with room: the one that
    // refused the stream when it still takes streams (REFUSED_STREAM), another after its GOAWAY)
    // (both: a retry after an HTTP/2 stream takes an HTTP/2 connection, never an idle HTTP/1.1
    // one: a stale one would move the request to another endpoint)
    const BackendProtocol proto =
        send_try > 0 && leg_.http2() ? BackendProtocol::kHttp2 : route.backend;
    if ((send_try > 0 && !leg_.http2()) ||
        !leg_.takePooled(ep.state->id, route.backend_tls.get(), route.tls_names[idx], proto)) {
      // Only a new connection arms the connect deadline: moving the deadline earlier re-arms
      // the timer, which a pooled reuse (the common case) must not pay.
      r = co_await connectLeg(leg_, route, idx);
      if (client_gone_) {  // the watcher saw the client leave (and aborted the connect)
        leg_.release(false);
        co_return false;
      }
    }
    // Another leg of the request failed while this one connected: however the connect
    // ended, this leg is not sent.
    if (!rq_.sibling_failure.empty()) co_return co_await failExchange(r, route, idx, lease);
    if (r.starved) {  // the gateway's shortage: the endpoint is not charged, nor are others tried
      if (starvedLogDue())
        log::warn("proxy", r.error + " (the gateway is out of " +
                               (r.starved == 1 ? "descriptors" : "memory") +
                               "; at most one such line every 10 s per worker)");
      leg_.release(false);
      rq_.outcome.ep_index = -1;  // (answered by the gateway: no engine's status)
      // The connection is closed after the answer: it holds a descriptor the gateway lacks.
      co_await sendError(503, "gateway_out_of_resources",
                         "the gateway cannot open a connection to the engine now (" +
                             std::string(r.starved == 1 ? "open-files limit" : "memory") +
                             "); try again",
                         {}, true, 1);
      co_return false;
    }
    if (!r.ok()) {
      lease.connectFailed(route.health, cb);
      log::warn("proxy", r.error);
      rq_.last_error = r.error;
      next_endpoint = true;
      co_return true;
    }
    phase_ = Phase::kAwaitResponse;
    deadline_.expireAfter(data_timeout);
    r = co_await leg_.send(rq_.up_head, body);
    const auto sent_at = std::chrono::steady_clock::now();
    if (r.ok()) {
      rq_.quota.sent = true;
      ep.state->requests.fetch_add(1, std::memory_order_relaxed);
      http::ResponseHead& rh = rq_.resp_head;  // a member: a 3 KB frame per request costs a malloc
      r = co_await readFinalHead(req.head.method, rh);
      if (r.ok()) {
        lease.settle(route.health, cb, rh.status);
        route.stats->upstream_latency.observe(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - sent_at).count());
        co_return co_await relayResponse(rh, route, req.head.method == "HEAD", lease);
      }
    }
    if (r.retry_safe && !client_gone_) {  // stale pooled connection: once more on a fresh one
      log::debug("proxy", "pooled connection to " + ep.state->label +
                              " failed before answering; resending on a fresh one");
      leg_.release(false);
      continue;
    }
    if (r.outcome == UpstreamLeg::Outcome::kSendFailed && !client_gone_) {
      rq_.last_error = "send to " + ep.state->label + " failed: " + r.error;
      log::warn("proxy", rq_.last_error);
      lease.settle(route.health, cb, 502);
      leg_.release(false);
      next_endpoint = true;
      co_return true;
    }
    co_return co_await failExchange(r, route, idx, lease);
  }
  next_endpoint = true;
  co_return true;
}

asio::awaitable<routing::Decision> Exchange::decide(const Route& route,
                                                    const routing::Pipeline& pipeline,
                                                    const routing::RequestContext& rctx,
                                                    routing::CandidateSet& cands) {
  routing::Decision d = pipeline.run(rctx, cands);
  if (!d.need_remote || !rctx.cycle) co_return d;
  const auto& sa = route.rule.service_args;
  RemoteIndexCall c;
  c.addr = sa.value("kvIndexAddr", std::string());
  c.timeout = std::chrono::milliseconds(sa.value("kvIndexTimeoutMs", 5));
  c.tenant = sa.value("kvIndexTenant", std::string("default"));
  c.block_size = static_cast<uint32_t>(sa.value("kvBlockSize", 16));
  c.model = rq_.facts_parsed && rq_.facts.has_model ? rq_.facts.model
                                                    : sa.value("model_name", std::string());
  routing::RemoteHint& remote = rctx.cycle->remote;
  co_await askRemoteIndex(w_.io, c, rctx.cycle->chain, remote);
  if (remote.state == routing::RemoteHint::State::kWanted)
    remote.state = routing::RemoteHint::State::kFailed;  // (never asks twice)
  co_return pipeline.run(rctx, cands, static_cast<size_t>(d.stage));
}

asio::awaitable<bool> Exchange::forward(const Request& req, const Route& route,
                                        const routing::Pipeline* pipeline, int role) {
  const size_t n = route.endpoints.size();
  if (!pipeline) pipeline = route.pipeline.get();
  // (the quota stage may have asked a stream for its usage: filters/quota.cc)
  const std::string_view body = rq_.quota.inject ? std::string_view(rq_.quota_body) : req.body;
  // (an answer the gateway reads for usage must not come compressed)
  // (identity: answers the gateway reads, for quota usage or a tokenize check)
  buildUpstreamHead(req, route, body, rq_.up_head, rq_.up_host_at,
                    rq_.quota.active || rq_.tok_check != nullptr);
  if (n == 0 || !pipeline) {
    co_await sendError(503, "no_healthy_upstream", "service has no endpoints");
    co_return true;
  }
  routing::RequestContext rctx =
      requestContext(req.head, rq_.facts_parsed ? &rq_.facts : nullptr, route, source_key_);
  rq_.cycle.beginRouting();  // (the chain: at most 8192 entries, kv_exact's block bound)
  rctx.cycle = &rq_.cycle;
  const bool cb = route.rule.cb_enable;
  // A request naming a stored Responses API response goes where that response is (the engine
  // holds it): a Responses request continuing it (previous_response_id), and a retrieve or cancel
  // of it (GET .../v1/responses/{id}, POST .../{id}/cancel). Every other endpoint is excluded, and
  // a draining home still takes it (the conversation finishes there); when the home cannot
  // serve, a clear error rather than an engine that answers 404 (response_homes.h).
  std::string_view pin_id, named_id;  // pinned to its home / only checked for its owner
  ResponseHomes* homes = route.stats->response_homes.get();
  if (homes) {
    if (rq_.api == Api::kResponses && rq_.facts_parsed) {
      pin_id = rq_.facts.previous_response_id;
      // The engine names the new response after the body's "request_id" (vLLM), or "resp_" and
      // the request's X-Request-Id: naming another's stored response would replace it there.
      bool taken = false;
      const std::string owner = rq_.responseOwner();
      for (const std::string& id :
           {rq_.facts.response_request_id, "resp_" + rq_.facts.response_request_id,
            "resp_" + rq_.request_id}) {
        bool foreign = false;
        if (!id.empty() && id != "resp_") homes->find(id, owner, &foreign);
        taken = taken || foreign;
      }
      if (taken) {
        route.stats->response_pins[4].fetch_add(1, std::memory_order_relaxed);
        co_await sendError(400, "request_id_in_use",
                           "request_id (or X-Request-Id) names a stored response of another "
                           "caller; choose another",
                           "request_id");
        co_return true;
      }
    } else if (rq_.api == Api::kOpenAi) {
      pin_id = engines::responses::storedResponseRequestId(req.head.method, req.head.target);
      named_id = engines::responses::responseIdUnderPath(req.head.target);
    }
  }
  const bool continuation = rq_.api == Api::kResponses;
  std::string home;
  if (!pin_id.empty() || !named_id.empty()) {
    const std::string_view id = pin_id.empty() ? named_id : pin_id;
    bool foreign = false;
    home = homes->find(id, rq_.responseOwner(), &foreign);  // (owner: a temporary, used at once)
    if (foreign) {  // another principal's response: as unknown as the engine says a missing one is
      route.stats->response_pins[4].fetch_add(1, std::memory_order_relaxed);
      co_await sendError(404, "response_not_found",
                         "Response with id '" + std::string(id) + "' not found.",
                         continuation ? "previous_response_id" : "response_id");
      co_return true;
    }
    if (pin_id.empty()) home.clear();  // (another method or path on it: only checked)
  }
  if (!pin_id.empty()) {
    if (home.empty())
      route.stats->response_pins[2].fetch_add(1, std::memory_order_relaxed);  // routed as any
  }
  filterCandidates(route, rq_.excluded, role, /*draining=*/home.empty());
  if (!home.empty()) {
    auto& pins = route.stats->response_pins;
    size_t at = n;
    for (size_t i = 0; i < n; ++i)
      if (route.endpoints[i].state->label == home) at = i;
    if (at == n || rq_.excluded[at]) {
      pins[3].fetch_add(1, std::memory_order_relaxed);
      log::warn("proxy", std::string(continuation ? "previous_response_id " : "response ") +
                             std::string(pin_id) + ": its endpoint " + home + " is " +
                             (at == n ? "no longer in the rule" : "not available"));
      const std::string why = "response '" + std::string(pin_id) +
                              "' is stored on an endpoint that is " +
                              (at == n ? "no longer in this service" : "not available now") +
                              (continuation ? "; its history cannot be used elsewhere"
                                            : "; it cannot be read or cancelled elsewhere");
      if (continuation)
        co_await sendError(503, "previous_response_unavailable", why, "previous_response_id");
      else
        co_await sendError(503, "response_unavailable", why, "response_id");
      co_return true;
    }
    pins[1].fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) rq_.excluded[i] = rq_.excluded[i] || i != at;
  }
  routing::CandidateSet cands{route.endpoints, rq_.excluded};
  rq_.last_error.clear();
  for (size_t attempt = 0; attempt < 2 * n; ++attempt) {
    routing::Decision d = co_await decide(route, *pipeline, rctx, cands);
    rq_.cycle.releaseTokens();  // (the chain, if any, is what a retry reuses)
    if (d.index < 0) break;
    rq_.trace.markRouted(std::chrono::steady_clock::now());
    const size_t idx = static_cast<size_t>(d.index);
    auto& state = *route.endpoints[idx].state;
    bool trial = false;  // a half-open breaker's single trial request
    if (!state.health.admits(cb, trial)) {
      rq_.excluded[idx] = true;  // half-open with its trial already out
      continue;
    }
    endpoints::EndpointLease lease(state, trial);  // in flight from the pick on
    if (d.track_chain && rq_.cycle.chain_ready) lease.addChain(rq_.cycle.chain);
    // Queued prefill until the first response byte: only a stream's first byte marks the end of
    // its prefill (a non-streaming answer arrives when the whole generation is done).
    if (d.prefill_blocks > 0 && rq_.facts_parsed && rq_.facts.stream.value_or(false))
      lease.addPrefill(d.prefill_blocks, route.kv_block_tokens, nowNs());
    rq_.outcome.ep_index = d.index;
    rq_.outcome.endpoint = &state.label;
    rq_.outcome.key = routing::decisionKeyName(d.key);
    rq_.outcome.stage = pipeline->stageName(d.stage).c_str();
    rq_.outcome.spilled = d.spilled;
    rq_.outcome.matched_blocks = d.matched_blocks;
    setUpstreamHost(rq_.up_head, rq_.up_host_at, state.label);
    rq_.trace.attempt(rq_.up_head, &state.label, std::chrono::steady_clock::now());
    bool next_endpoint = false;
    bool ok = co_await exchange(req, body, route, idx, lease, next_endpoint);
    rq_.trace.attemptEnded(std::chrono::steady_clock::now(),
                           rq_.outcome.engine_answered ? rq_.outcome.status : 0);
    if (!next_endpoint) co_return ok;
    if (client_gone_) co_return false;
    rq_.excluded[idx] = true;
  }
  stopWatch();
  rq_.outcome.ep_index = -1;
  // Named locals: GCC 12 double-destroys a conditional's temporary inside co_await.
  const bool tried = !rq_.last_error.empty();
  const std::string message = tried ? rq_.last_error : std::string("no healthy endpoint");
  const char* code = tried ? "upstream_connect_failed" : "no_healthy_upstream";
  co_await sendError(tried ? 502 : 503, code, message);
  co_return true;
}

}  // namespace kvgate::proxy
