// Forwarding a request of a P/D rule (pd_disagg_mode): seed 000's ladder picks a prefill and a
// decode endpoint, then the rule's engine dialect (kvEngineType; proxy/pd/: one file per engine,
// over the wire rules of engines/pd_dialect.h) shapes the two legs.
//
// Picks: the prefill pick runs the rule's pipeline (kv_exact for kvExactMode 1, then min_load)
// over the ep_role 1 endpoints that are up and not behind an open breaker; the decode pick runs
// the decode pipeline (min_load) over the ep_role 2 ones. Each pick takes an EndpointLease at
// once (in-flight count, half-open trial), released on every path; the prefill lease ends with
// its leg. When no pair can be formed, the any-healthy rescue serves the request as a plain
// single-leg request over the role-less (ep_role 0) endpoints, else 503 no_healthy_upstream.
//
// Legs: each carries the X-Request-Id ___prefill_addr_<ip:nixl_port>___decode_addr_<ip:nixl_port>
// _<32 hex> (upstream's form), naming the endpoints of its pair: both legs carry the same one
// unless the decode moved to another endpoint (below).
//   vllm, trtllm (sequential): the first leg (prefill / context) is answered in full (at most
//     kMaxLegAnswerBytes) before the second leg (decode / generation) starts; a connect failure
//     moves to the next prefill endpoint; a first leg answered with a non-2xx status is relayed
//     to the client as is and no second leg runs; any other first-leg failure is a 502 naming
//     the prefill endpoint; a TensorRT-LLM context answer that already finished is the answer.
//   sglang (concurrent): the same body goes to both at once; the decode answer is relayed and
//     the prefill answer read and dropped by a background drain with its own deadline. A prefill
//     leg that fails while decode has not answered ends the decode leg too: 502 prefill_failed;
//     a decode leg that fails (an error status, a broken or timed-out exchange) ends the prefill
//     leg at once (its engine request aborted, its in-flight slot freed).
// The second leg is relayed like any response (relay.cc); a decode endpoint that cannot be
// reached is replaced by the next one, and the decode leg's id names it. A pull connector (vLLM
// NIXL's kv_transfer_params, TensorRT-LLM's disaggregated_params, SGLang's bootstrap room) lets
// any decode take the prefill's KV, so the first leg is not redone; a vLLM prefill that answered
// no kv_transfer_params is a push connector's (P2P NCCL: the KV went to the decode its id named),
// so the prefill is redone under an id naming the next decode (kvgate_pd_prefill_redone_total);
// when no decode endpoint is left: 502 decode_failed. A client that goes
// away aborts every open leg (the watcher and the deadline abort both). The breaker and passive
// health learn each leg's outcome on that leg's endpoint.
#include <random>

#include "common/ids.h"
#include "common/log.h"
#include "common/splitmix.h"
#include "engines/openai_responses.h"
#include "engines/pd_dialect.h"
#include "http/server.h"
#include "proxy/exchange.h"
#include "proxy/pd/dialect.h"
#include "proxy/request_keys.h"
#include "routing/eligibility/filters.h"

namespace kvgate::proxy {

namespace pd = engines::pd;

struct Exchange::PdState {
  PdState(Worker& w, LegObserver& o) : leg(w.io, w.pool, o) {}
  UpstreamLeg leg;  // the first leg (prefill / context) of a sequential dialect
  std::string head;
  size_t host_at = std::string::npos;
  std::string first_body, second_body, answer, content_type;
  std::vector<bool> decode_excluded;
  std::string id_suffix;  // the fresh part of the legs' request id (rq_.upstream_id)
  http::ResponseHead rh;
  // SGLang: the background drain of a prefill leg (cleared by the drain when it ends), the
  // request it serves, and a refusal it relays (status, with its body in `answer`).
  UpstreamLeg* drain = nullptr;
  uint64_t drain_request = 0;
  int first_status = 0;

  void shrink() {
    for (std::string* s : {&first_body, &second_body, &answer, &head})
      if (s->capacity() > kKeepBufferBytes) std::string().swap(*s);
  }
};

struct Exchange::LegAnswer {
  enum class Kind : uint8_t { kOk, kConnectFailed, kFailed, kClientGone } kind = Kind::kOk;
  int status = 0;
  std::string error;
};

namespace {

// Reads a response body completely into `out` (de-chunked), at most kMaxLegAnswerBytes.
// `reusable` is set when the connection may be pooled afterwards.
asio::awaitable<bool> readWhole(UpstreamLeg& leg, const http::ResponseHead& rh, std::string& out,
                                std::string& error, bool& reusable, bool& too_large) {
  out.clear();
  reusable = rh.keep_alive;
  too_large = false;
  Buffer& b = leg.buf();
  switch (rh.body_kind) {
    case http::BodyKind::kNone:
      co_return true;
    case http::BodyKind::kLength: {
      if (rh.content_length > pd::kMaxLegAnswerBytes) {
        too_large = true;
        error = "answer of " + std::to_string(rh.content_length) + " bytes is over the bound";
        co_return false;
      }
      uint64_t left = rh.content_length;
      for (;;) {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(left, b.size()));
        out.append(b.data(), take);
        b.consume(take);
        left -= take;
        if (left == 0) co_return true;
        if (!co_await leg.readBody()) break;
      }
      error = "answer truncated";
      co_return false;
    }
    case http::BodyKind::kChunked: {
      http::ChunkedScanner sc;
      for (;;) {
        auto st = sc.feed(b.data(), b.size(), &out);
        b.consume(st.consumed);
        if (st.error) {
          error = "malformed chunked answer";
          co_return false;
        }
        if (out.size() > pd::kMaxLegAnswerBytes) {
          too_large = true;
          error = "answer over the bound of " + std::to_string(pd::kMaxLegAnswerBytes) + " bytes";
          co_return false;
        }
        if (st.done) co_return true;
        if (!co_await leg.readBody()) break;
      }
      error = "answer truncated";
      co_return false;
    }
    case http::BodyKind::kUntilClose:
      reusable = false;
      for (;;) {
        out.append(b.data(), b.size());
        b.clear();
        if (out.size() > pd::kMaxLegAnswerBytes) {
          too_large = true;
          error = "answer over the bound of " + std::to_string(pd::kMaxLegAnswerBytes) + " bytes";
          co_return false;
        }
        if (!co_await leg.readBody()) co_return !leg.timedOut();
      }
  }
  co_return false;
}

// The bootstrap room of an SGLang request: random in [0, 2^63-1], unique per request.
uint64_t newRoom() {
  thread_local common::SplitMix64 rng{std::random_device{}() ^
                                      (static_cast<uint64_t>(std::random_device{}()) << 32)};
  return rng.next() >> 1;
}

}  // namespace

// (here, where PdState is complete)
Exchange::Exchange(Worker& w, std::shared_ptr<Listener> l, ClientSide& client)
    : w_(w),
      l_(std::move(l)),
      client_(&client),
      leg_(w.io, w.pool, *this),
      deadline_(w.io.get_executor()) {}

Exchange::~Exchange() = default;

// The concurrent prefill leg failed while the decode leg waited: the prefill engine's own answer
// when it refused the request with one, else 502 prefill_failed.
asio::awaitable<void> Exchange::answerSiblingFailure() {
  stopWatch();
  if (pd_ && pd_->first_status >= 400) {
    co_await answerWith(pd_->first_status, "application/json", pd_->answer);
    co_return;
  }
  co_await sendError(502, "prefill_failed", rq_.sibling_failure);
}

void Exchange::abortLegs(bool timeout) {
  leg_.abort(timeout);
  if (!pd_) return;
  pd_->leg.abort(timeout);
  // The concurrent prefill has its own deadline: only a client that left its request ends it.
  if (pd_->drain && !timeout && client_gone_ && pd_->drain_request == request_seq_)
    pd_->drain->abandon();
}

void Exchange::pdAfterRequest() {
  if (pd_) pd_->shrink();
}

asio::awaitable<bool> Exchange::answerWith(int status, std::string_view content_type,
                                           std::string_view body) {
  HeadFields& h = ownHead(status);
  h.add("content-type", content_type.empty() ? std::string_view("application/json") : content_type);
  h.add("content-length", std::to_string(body.size()));
  h.add("x-request-id", rq_.request_id);
  addRuleHeaders(h);
  rq_.outcome.status = status;
  rq_.outcome.engine_answered = true;  // (every caller relays an engine's answer)
  rq_.outcome.bytes = body.size();
  countResponse(status);
  if (rq_.quota.active) rq_.quota.status = status;  // settlement reads the answer's usage
  if (rq_.quota.active || rq_.trace.on) rq_.usage.feed(body);  // (and a sampled trace)
  co_return co_await writeAnswer(body);
}

// The first leg of a sequential dialect on prefill endpoint `idx`: open, send, read the whole
// answer into pd_->answer. A stale pooled connection is replaced once (nothing reached the
// engine).
asio::awaitable<Exchange::LegAnswer> Exchange::firstLeg(const Request& req, const Route& route,
                                                        size_t idx, endpoints::EndpointLease& lease,
                                                        std::string_view body) {
  const auto& rule = route.rule;
  const auto& ep = route.endpoints[idx];
  const bool cb = rule.cb_enable;
  const auto data_timeout = dataTimeout(rule);
  UpstreamLeg& leg = pd_->leg;
  LegAnswer a;
  using K = LegAnswer::Kind;
  for (int send_try = 0; send_try < 2; ++send_try) {
    UpstreamLeg::Result r;
    if (client_gone_) {  // (an HTTP/2 stream reset while the request was routed)
      a.kind = K::kClientGone;
      co_return a;
    }
    if (send_try > 0 || !leg.takePooled(ep.state->id, route.backend_tls.get(), route.tls_names[idx],
                                        route.backend)) {
      r = co_await connectLeg(leg, route, idx);
      if (client_gone_) {
        leg.release(false);
        a.kind = K::kClientGone;
        co_return a;
      }
      if (!r.ok()) {
        if (!r.starved) lease.connectFailed(route.health, cb);  // (a shortage of ours: no blame)
        log::warn("proxy", r.error);
        rq_.last_error = r.error;
        a.kind = K::kConnectFailed;
        co_return a;
      }
    }
    phase_ = Phase::kAwaitResponse;
    deadline_.expireAfter(data_timeout);
    r = co_await leg.send(pd_->head, body);
    if (r.ok()) rq_.quota.sent = true;  // (settlement: the engine has the request)
    if (r.ok()) {
      ep.state->requests.fetch_add(1, std::memory_order_relaxed);
      http::ResponseHead& rh = pd_->rh;
      while ((r = co_await leg.readHead(req.head.method, rh)).ok() && r.interim)
        leg.consumeHead(rh);  // the first leg's 1xx are not the client's
      if (r.ok()) {
        // (vLLM's and TensorRT-LLM's first leg is never streamed: its head comes once the prompt
        // is computed, a sample of the prefill rate)
        if (rh.status >= 200 && rh.status <= 299) lease.prefillDone(nowNs());
        std::string_view ct = rh.get("content-type");
        ct = ct.substr(0, 256);  // (a cut value ends in no whitespace: HTTP/2 refuses that)
        while (!ct.empty() && (ct.back() == ' ' || ct.back() == '\t')) ct.remove_suffix(1);
        pd_->content_type.assign(ct);
        leg.consumeHead(rh);
        bool reusable = false, too_large = false;
        std::string error;
        const bool whole = co_await readWhole(leg, rh, pd_->answer, error, reusable, too_large);
        deadline_.clear();
        if (client_gone_) {
          leg.release(false);
          a.kind = K::kClientGone;
          co_return a;
        }
        if (!whole) {
          if (!too_large)  // (the gateway's bound is not the endpoint's failure)
            lease.settle(route.health, cb, leg.timedOut() ? 504 : 502);
          leg.release(false);
          a.kind = K::kFailed;
          a.status = leg.timedOut() ? 504 : 502;
          a.error = leg.timedOut() ? "did not answer in time" : error;
          co_return a;
        }
        lease.settle(route.health, cb, rh.status);
        leg.release(reusable);
        a.status = rh.status;
        co_return a;
      }
    }
    deadline_.clear();
    if (r.retry_safe && !client_gone_) {
      leg.release(false);
      continue;
    }
    leg.release(false);
    if (client_gone_) {
      a.kind = K::kClientGone;
      co_return a;
    }
    const bool timeout = r.outcome == UpstreamLeg::Outcome::kTimeout;
    lease.settle(route.health, cb, timeout ? 504 : 502);
    a.kind = K::kFailed;
    a.status = timeout ? 504 : 502;
    a.error = timeout ? std::string("did not answer in time") : r.error;
    co_return a;
  }
  a.kind = K::kFailed;
  a.status = 502;
  a.error = "closed the connection twice before answering";
  co_return a;
}

// Tier 0's pinned decode endpoint (`peer`, -1 = none) when it is a candidate that admits the
// request; else -1.
int Exchange::pinnedDecode(const Route& route, int peer, endpoints::EndpointLease& lease) {
  if (peer < 0 || pd_->decode_excluded[static_cast<size_t>(peer)]) return -1;
  auto& state = *route.endpoints[static_cast<size_t>(peer)].state;
  bool trial = false;
  if (!state.health.admits(route.rule.cb_enable, trial)) return -1;
  lease = endpoints::EndpointLease(state, trial);
  return peer;
}

// loxilb_ai_pd_tier_selected_total, once per request: the prefill stage that chose the
// endpoint that served (`stage` -1: the admission gate's hand-off, -2: the rescue).
void Exchange::countTier(const Route& route, int stage) {
  PdTier t = PdTier::kRescue;
  if (stage == -1) {
    t = PdTier::kAdmission;
  } else if (stage >= 0) {
    switch (route.pipeline->stageLadder(stage)) {
      case routing::Ladder::kTier0: t = PdTier::kTier0; break;
      case routing::Ladder::kTier1: t = PdTier::kTier1; break;
      case routing::Ladder::kTier15: t = PdTier::kTier15; break;
      default: t = PdTier::kTier2; break;
    }
  }
  route.stats->pd_tiers[static_cast<size_t>(t)].fetch_add(1, std::memory_order_relaxed);
}

int Exchange::pickDecode(const routing::RequestContext& rctx, const Route& route,
                         endpoints::EndpointLease& lease) {
  // A new decode session: not on the controller's DRAINING ones (the decode mask was made with
  // draining off, for a pinned conversation; or DISABLED since), counted as the controller
  // filter's drops.
  routing::Eligibility::applyLater(routing::eligibility::kController, route.endpoints,
                                   {nowNs(), 2, /*draining=*/true}, pd_->decode_excluded,
                                   &route.stats->eligibility);
  routing::CandidateSet c{route.endpoints, pd_->decode_excluded};
  const bool cb = route.rule.cb_enable;
  for (size_t attempt = 0; attempt < route.endpoints.size(); ++attempt) {
    routing::Decision d = route.decode_pipeline->run(rctx, c);
    if (d.index < 0) return -1;
    auto& state = *route.endpoints[static_cast<size_t>(d.index)].state;
    bool trial = false;
    if (!state.health.admits(cb, trial)) {
      pd_->decode_excluded[static_cast<size_t>(d.index)] = true;
      continue;
    }
    lease = endpoints::EndpointLease(state, trial);
    return d.index;
  }
  return -1;
}

// The second leg (decode / generation): relayed to the client; an unreachable decode endpoint is
// replaced by the next one. `first` is the decode endpoint picked before the first leg, with
// its lease.
asio::awaitable<bool> Exchange::secondLeg(const Request& req, const Route& route,
                                          size_t prefill_idx, const routing::RequestContext& rctx,
                                          std::string_view body,
                                          endpoints::EndpointLease& first_lease, int first_idx,
                                          bool* redo_prefill) {
  const std::string& prefill_label = route.endpoints[prefill_idx].state->label;
  rq_.leg_note = " (decode leg, after the prefill on " + prefill_label + ")";
  rq_.last_error.clear();
  for (size_t attempt = 0; attempt < 2 * route.endpoints.size(); ++attempt) {
    endpoints::EndpointLease lease;
    const int idx = attempt == 0 ? first_idx : pickDecode(rctx, route, lease);
    if (idx < 0) break;
    if (attempt == 0) lease = std::move(first_lease);
    // The id names the decode endpoint this leg goes to (another one than the prefill's id
    // named when the first was unreachable: a pull connector takes the KV from the prefill
    // whatever the id says, and the id stays true in the engines' and our logs).
    rq_.upstream_id =
        pd::pdRequestId(route.transfer_addr[prefill_idx],
                        route.transfer_addr[static_cast<size_t>(idx)], pd_->id_suffix);
    buildUpstreamHead(req, route, body, rq_.up_head, rq_.up_host_at, false, "decode");
    const auto& state = *route.endpoints[static_cast<size_t>(idx)].state;
    rq_.outcome.ep_index = idx;
    rq_.outcome.endpoint = &state.label;
    setUpstreamHost(rq_.up_head, rq_.up_host_at, state.label);
    rq_.trace.attempt(rq_.up_head, &state.label, std::chrono::steady_clock::now());
    bool next_endpoint = false;
    bool ok = co_await exchange(req, body, route, static_cast<size_t>(idx), lease, next_endpoint);
    rq_.trace.attemptEnded(std::chrono::steady_clock::now(),
                           rq_.outcome.engine_answered ? rq_.outcome.status : 0);
    if (!next_endpoint) {
      // SGLang: a decode leg that failed (an error status, a timeout, or no whole answer)
      // leaves nothing for the concurrent prefill to serve: it is given up now, so its engine
      // request is aborted and its endpoint's in-flight slot freed at once, not when its own
      // deadline ends. Its endpoint's health learns nothing from it: the two legs wait on each
      // other (decode pulls the prefill's KV), so a stall cannot be pinned on either from here;
      // the active probes and the prefill's own failures judge that endpoint.
      if (pd_->drain && pd_->drain_request == request_seq_ &&
          (rq_.outcome.status == 0 || rq_.outcome.status >= 400 || !ok))
        pd_->drain->abandon();
      co_return ok;
    }
    if (client_gone_) co_return false;
    if (!rq_.sibling_failure.empty()) {  // the concurrent prefill failed meanwhile
      co_await answerSiblingFailure();
      co_return true;
    }
    pd_->decode_excluded[static_cast<size_t>(idx)] = true;
    if (redo_prefill) {  // a push connector sent the KV to this unreachable endpoint
      *redo_prefill = true;
      co_return true;
    }
  }
  // No decode endpoint: a concurrent prefill of this request is given up too.
  if (pd_->drain && pd_->drain_request == request_seq_) pd_->drain->abandon();
  co_return co_await answerNoDecode();
}

// 502 decode_failed: no decode endpoint could be reached (the last one's error, the leg note).
asio::awaitable<bool> Exchange::answerNoDecode() {
  stopWatch();
  rq_.outcome.ep_index = -1;
  const std::string message =
      (rq_.last_error.empty() ? std::string("no healthy decode endpoint") : rq_.last_error) +
      rq_.leg_note;
  co_await sendError(502, "decode_failed", message);
  co_return true;
}

// SGLang: the prefill leg runs in the background (its own leg, lease and deadline) while the
// decode leg is relayed.
asio::awaitable<bool> Exchange::concurrentLegs(const Request& req, const Route& route, size_t pidx,
                                               endpoints::EndpointLease& plase,
                                               const routing::RequestContext& rctx,
                                               endpoints::EndpointLease& dlease, int didx) {
  PdState& st = *pd_;
  auto leg = std::make_shared<UpstreamLeg>(w_.io, w_.pool, static_cast<LegObserver&>(*this));
  std::string head;
  size_t host_at = std::string::npos;
  buildUpstreamHead(req, route, st.first_body, head, host_at, false, "prefill");
  setUpstreamHost(head, host_at, route.endpoints[pidx].state->label);
  // (its span stays open until the request ends: the drain may outlive it)
  rq_.trace.attempt(head, &route.endpoints[pidx].state->label, std::chrono::steady_clock::now());
  st.drain = leg.get();
  st.drain_request = request_seq_;
  st.first_status = 0;
  asio::co_spawn(w_.io,
                 drainPrefill(shared_from_this(), rq_.cfg, &route, pidx, leg, std::move(plase),
                              std::move(head), st.first_body, request_seq_),
                 asio::detached);
  co_return co_await secondLeg(req, route, pidx, rctx, st.first_body, dlease, didx);
}

asio::awaitable<void> Exchange::drainPrefill(std::shared_ptr<Exchange> self,
                                             std::shared_ptr<const VipConfig> cfg,
                                             const Route* route, size_t idx,
                                             std::shared_ptr<UpstreamLeg> leg,
                                             endpoints::EndpointLease lease, std::string head,
                                             std::string body, uint64_t request_seq) {
  (void)cfg;  // keeps `route` alive
  const auto& rule = route->rule;
  const auto& ep = route->endpoints[idx];
  const bool cb = rule.cb_enable;
  const auto connect_timeout = connectTimeout(rule);
  const auto data_timeout = dataTimeout(rule);
  asio::steady_timer timer(w_.io);
  timer.expires_after(connect_timeout + data_timeout);
  timer.async_wait([leg](const error_code& ec) {
    if (!ec) leg->abort(true);
  });
  std::string error, answer;
  int status = 0;         // the prefill engine's answer, when it gave a whole one
  int settle_status = 0;  // what the endpoint's health learns (0: nothing)
  bool connect_failed = false;
  for (int send_try = 0; send_try < 2; ++send_try) {  // a stale pooled connection: once more
    UpstreamLeg::Result r;
    // Given up before it started (the decode leg failed first): begin() would forget that.
    if (leg->abandoned()) break;
    if (send_try > 0 || !leg->takePooled(ep.state->id, route->backend_tls.get(),
                                         route->tls_names[idx], route->backend)) {
      r = co_await leg->connect(ep.state->id, route->addresses[idx], ep.state->label,
                                route->backend_tls.get(), route->tls_names[idx], route->backend);
      if (!r.ok()) {
        connect_failed = !r.starved;  // (no socket for want of descriptors: ours, no blame)
        if (r.starved)
          w_.stats.upstream_socket_failures[r.starved - 1].fetch_add(1, std::memory_order_relaxed);
        error = r.error;
        break;
      }
    }
    r = co_await leg->send(head, body);
    if (r.ok()) {
      ep.state->requests.fetch_add(1, std::memory_order_relaxed);
      http::ResponseHead rh;
      while ((r = co_await leg->readHead("POST", rh)).ok() && r.interim) leg->consumeHead(rh);
      if (r.ok()) {
        leg->consumeHead(rh);
        bool reusable = false, too_large = false;
        const bool whole = co_await readWhole(*leg, rh, answer, error, reusable, too_large);
        // The prefill is done when the whole answer is in, not at its head: the leg carries the
        // client's `stream`, and an SGLang prefill streams its head before computing anything.
        // (The sample includes the KV transfer the prefill answer waits for: a low estimate.)
        if (whole && rh.status >= 200 && rh.status <= 299) lease.prefillDone(nowNs());
        if (whole) {
          status = settle_status = rh.status;
          if (rh.status < 200 || rh.status > 299) error = "answered " + std::to_string(rh.status);
        } else if (too_large && rh.status >= 200 && rh.status <= 299) {
          error.clear();  // a big successful answer (logprobs): the prefill did its part
          status = settle_status = rh.status;
        } else if (!too_large) {  // (a gateway bound is not the endpoint's failure)
          settle_status = leg->timedOut() ? 504 : 502;
        }
        leg->release(whole && reusable);
        break;
      }
    }
    if (r.retry_safe && !leg->abandoned()) {
      leg->release(false);
      continue;
    }
    error = r.error;
    settle_status = r.outcome == UpstreamLeg::Outcome::kTimeout ? 504 : 502;
    leg->release(false);
    break;
  }
  timer.cancel();
  // The client left or the decode leg failed: the owner gave up, not the endpoint (the lease
  // releases an unsettled trial).
  if (!leg->abandoned()) {
    if (connect_failed)
      lease.connectFailed(route->health, cb);
    else if (settle_status)
      lease.settle(route->health, cb, settle_status);
  }
  lease.reset();  // the prefill endpoint's part is over (a parked request may take the slot)
  const bool current = pd_ && request_seq_ == request_seq;
  if (pd_ && pd_->drain == leg.get()) pd_->drain = nullptr;
  if (error.empty() || leg->abandoned()) co_return;
  log::warn("proxy", "prefill leg to " + ep.state->label + " failed: " + error);
  // The decode leg of the same request still waits for its answer: it cannot succeed without
  // this prefill, so it ends now with the prefill's failure (the engine's own answer when it
  // refused the request with one).
  // Whatever the decode leg is doing: not yet connected or connecting (exchange checks before
  // it sends and on a failed connect), waiting for its head, or streaming a head an SGLang
  // decode sends at once (then only an engine's refusal ends it: a broken prefill connection
  // may still have transferred the KV).
  if (current && !client_gone_) {
    rq_.sibling_failure = "prefill leg to " + ep.state->label + " failed: " + error;
    if (status >= 400) {
      pd_->first_status = status;
      pd_->answer = std::move(answer);
    }
    if (phase_ == Phase::kConnect || phase_ == Phase::kAwaitResponse ||
        (phase_ == Phase::kStream && status >= 400))
      leg_.abort(true);
  }
}

// An admission answer: the error in the API's shape with the gate's fields (`extra`: more members
// of the error object), Retry-After for 429 and 503, and the X-Loxilb-Admission-* headers.
asio::awaitable<void> Exchange::sendAdmission(const Route& route, int status, std::string_view code,
                                              std::string_view message, std::string_view extra,
                                              int64_t limit) {
  std::string body = errorBody(status, code, message);
  if (!extra.empty()) body.insert(body.size() - 2, std::string(",").append(extra));
  const auto& st = *route.stats;
  HeadFields& h = ownHead(status);
  h.add("content-type", "application/json");
  h.add("content-length", std::to_string(body.size()));
  h.add("x-request-id", rq_.request_id);
  if (status == 429 || status == 503) h.add("retry-after", "1");
  h.add("x-loxilb-admission-inflight", std::to_string(st.admission_inflight.load()));
  h.add("x-loxilb-admission-queued", std::to_string(st.admission_queued.load()));
  h.add("x-loxilb-admission-limit", std::to_string(limit));
  addRuleHeaders(h);
  rq_.outcome.status = status;
  rq_.outcome.denied = true;  // the admission gate's answer
  countResponse(status);
  co_await writeAnswer(body);
}

// Parks the request on prefill endpoint `idx`'s FIFO until a slot is handed to it or it finds
// one free, there or on one of `siblings` with nobody parked (0: the slot in `lease`, its
// endpoint in `granted`), the queue window passes (504 answered: 1), the rule's listener closes
// or the gateway drains (503: 1), or the client leaves (-1). Looks again every 250 ms.
asio::awaitable<int> Exchange::park(const Route& route, size_t idx,
                                    const std::vector<size_t>& siblings,
                                    endpoints::EndpointLease& lease, int& granted) {
  const auto& a = route.admission;
  auto& st = *route.stats;
  auto& es = *route.endpoints[idx].state;
  struct Park {
    explicit Park(const asio::any_io_executor& ex) : timer(ex) {}
    asio::steady_timer timer;
  };
  auto p = std::make_shared<Park>(executor());
  auto waiter = std::make_shared<endpoints::AdmissionQueue::Waiter>();
  waiter->wake = [ex = executor(), wp = std::weak_ptr<Park>(p)] {
    asio::post(ex, [wp] {
      if (auto q = wp.lock()) q->timer.cancel();
    });
  };
  auto count = [&](AdmissionDecision d) {
    st.admission[static_cast<size_t>(d)].fetch_add(1, std::memory_order_relaxed);
  };
  if (!es.admission.push(waiter, static_cast<size_t>(a.queue_depth), es.queued)) {
    count(AdmissionDecision::kShed);
    co_await sendAdmission(
        route, 429, "admission_capacity",
        "every prefill endpoint is at its in-flight cap and the queue is full",
        "\"retry_after\":1,\"jitter_hint_ms\":" + std::to_string(100 + idx * 37 % 400),
        a.prefill_max);
    co_return 1;
  }
  st.admission_queued.fetch_add(1, std::memory_order_relaxed);
  struct Unqueue {  // the rule's queued gauge, on every path
    std::atomic<int64_t>& q;
    ~Unqueue() { q.fetch_sub(1, std::memory_order_relaxed); }
  } unqueue{st.admission_queued};
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::milliseconds(a.queue_wait_ms);
  deadline_.clear();
  phase_ = Phase::kAwaitResponse;  // the client watcher may start while the request waits
  watch_wanted_ = true;
  // A free slot nobody handed over: 1 claimed on `j`, 2 a hand-off granted idx meanwhile.
  auto claimOn = [&](size_t j) {
    auto& ej = *route.endpoints[j].state;
    if (j != idx && ej.queued.load() != 0) return 0;  // first come, first served there
    int64_t cur = ej.active.load();
    while (cur < a.prefill_max) {
      if (ej.active.compare_exchange_weak(cur, cur + 1)) {
        if (waiter->claim()) {
          es.admission.remove(waiter.get(), es.queued);
          return 1;
        }
        ej.active.fetch_sub(1);  // the hand-off's slot is ours: give this one back
        return 2;
      }
    }
    return 0;
  };
  size_t got = idx;
  for (;;) {
    if (waiter->state.load() == endpoints::AdmissionQueue::Waiter::kGranted) break;
    int c = claimOn(idx);
    for (size_t k = 0; c == 0 && k < siblings.size(); ++k)
      if (siblings[k] != idx && (c = claimOn(siblings[k])) == 1) got = siblings[k];
    if (c != 0) break;
    const auto now = std::chrono::steady_clock::now();
    const bool timeout = now >= deadline;
    const bool drained = w_.draining || l_->closed.load();
    if (timeout || drained || client_gone_) {
      if (!waiter->giveUp()) break;  // granted just now: the slot is ours
      es.admission.remove(waiter.get(), es.queued);
      stopWatch();
      if (client_gone_) co_return -1;
      const auto queued_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - t0).count();
      if (timeout) {
        count(AdmissionDecision::kTimeout);
        co_await sendAdmission(route, 504, "admission_queue_timeout",
                               "the request waited the whole admission queue window",
                               "\"queued_ms\":" + std::to_string(queued_ms), a.prefill_max);
      } else {
        count(AdmissionDecision::kDrained);
        co_await sendAdmission(route, 503, "admission_drained",
                               "the queued request was dropped: the service is going away", {},
                               a.prefill_max);
      }
      co_return 1;
    }
    p->timer.expires_after(std::min<std::chrono::steady_clock::duration>(
        deadline - now, std::chrono::milliseconds(250)));
    error_code ec;
    co_await p->timer.async_wait(useEc(ec));
  }
  stopWatch();
  lease = endpoints::EndpointLease(*route.endpoints[got].state, false,
                                   endpoints::EndpointLease::Adopt{});
  granted = static_cast<int>(got);
  count(AdmissionDecision::kPark);
  co_return client_gone_ ? -1 : 0;  // (a client gone: the lease hands the slot on)
}

asio::awaitable<int> Exchange::admit(const Route& route, int& granted,
                                     endpoints::EndpointLease& granted_lease) {
  const auto& a = route.admission;
  auto& st = *route.stats;
  const bool enforce = a.enforce();
  auto count = [&](AdmissionDecision d) {
    st.admission[static_cast<size_t>(d)].fetch_add(1, std::memory_order_relaxed);
  };
  // The global valve.
  if (a.max_outstanding > 0 && st.admission_inflight.load() >= a.max_outstanding) {
    if (enforce) {
      count(AdmissionDecision::kValve);
      co_await sendAdmission(route, 503, "admission_no_capacity",
                             "the service has the most requests in flight it admits", {},
                             a.max_outstanding);
      co_return 1;
    }
    count(AdmissionDecision::kWouldShed);
    co_return 0;
  }
  const size_t n = route.endpoints.size();
  auto load = [&](size_t i) {
    return route.endpoints[i].state->active.load(std::memory_order_relaxed);
  };
  // Decode endpoints at their cap leave the decode pick; when all are, the request is shed.
  if (a.decode_max > 0) {
    bool usable = false, free = false;
    for (size_t i = 0; i < n; ++i) {
      if (pd_->decode_excluded[i]) continue;
      usable = true;
      if (load(i) < a.decode_max)
        free = true;
      else if (enforce)
        pd_->decode_excluded[i] = true;
    }
    if (usable && !free) {
      if (!enforce) {
        count(AdmissionDecision::kWouldShed);
        co_return 0;
      }
      count(AdmissionDecision::kShed);
      co_await sendAdmission(route, 429, "admission_capacity",
                             "every decode endpoint is at its in-flight cap",
                             "\"retry_after\":1,\"jitter_hint_ms\":250", a.decode_max);
      co_return 1;
    }
  }
  // Prefill endpoints at their cap (or with requests parked: first come, first served) leave
  // the ladder; when all are, the request parks on the shortest FIFO or is shed.
  if (a.prefill_max > 0) {
    int usable = -1;
    bool free = false;
    std::vector<size_t> siblings;  // the prefill endpoints the mask left (a parked request's)
    for (size_t i = 0; i < n; ++i) {
      if (rq_.excluded[i]) continue;
      siblings.push_back(i);
      const auto& es = *route.endpoints[i].state;
      if (usable < 0 ||
          es.queued.load() < route.endpoints[static_cast<size_t>(usable)].state->queued.load())
        usable = static_cast<int>(i);
      if (load(i) < a.prefill_max && es.queued.load() == 0)
        free = true;
      else if (enforce)
        rq_.excluded[i] = true;
    }
    if (usable >= 0 && !free) {
      if (!enforce) {
        count(a.queue_depth > 0 ? AdmissionDecision::kWouldPark : AdmissionDecision::kWouldShed);
        co_return 0;
      }
      if (a.queue_depth == 0) {
        count(AdmissionDecision::kShed);
        co_await sendAdmission(route, 429, "admission_capacity",
                               "every prefill endpoint is at its in-flight cap",
                               "\"retry_after\":1,\"jitter_hint_ms\":250", a.prefill_max);
        co_return 1;
      }
      co_return co_await park(route, static_cast<size_t>(usable), siblings, granted_lease,
                              granted);
    }
  }
  count(AdmissionDecision::kAdmit);
  co_return 0;
}

asio::awaitable<bool> Exchange::forwardPd(const Request& req, const Route& route) {
  // What generates nothing (Messages' count_tokens, tokenize, detokenize) needs no pair: one
  // decode endpoint serves it, the least loaded.
  if (rq_.api == Api::kCountTokens || rq_.api == Api::kTokenize || rq_.api == Api::kDetokenize)
    co_return co_await forward(req, route, route.decode_pipeline.get(), 2);
  // The Anthropic Messages API carries the P/D fields through vLLM's conversion
  // (kv_transfer_params, vLLM PR 37535), not SGLang's (its /v1/messages drops the bootstrap
  // fields: sglang issue 35229) nor TensorRT-LLM's (disaggregated_params are not converted).
  if (rq_.api == Api::kMessages && *route.pd_dialect != engines::pd::Dialect::kVllm) {
    co_await sendError(
        400, "invalid_request",
        std::string("the Anthropic Messages API is not served on a prefill/decode "
                    "service of ") +
            (*route.pd_dialect == engines::pd::Dialect::kSglang ? "SGLang" : "TensorRT-LLM") +
            " engines (their /v1/messages does not carry the prefill/decode "
            "fields); use /v1/chat/completions");
    co_return !client_gone_;
  }
  if (!engines::responses::responseIdUnderPath(req.head.target).empty()) {
    // (a stored Responses API response: none is made on a P/D rule, and its owner is not known)
    route.stats->response_pins[4].fetch_add(1, std::memory_order_relaxed);
    co_await sendError(404, "response_not_found",
                       "a prefill/decode service stores no Responses API responses", "response_id");
    co_return !client_gone_;
  }
  if (!rq_.facts_parsed) {
    co_await sendError(400, "invalid_request", "a prefill/decode service needs a JSON object body",
                       "body");
    co_return !client_gone_;
  }
  // The Responses API bounds its answer with max_output_tokens, which the dialects' one-token
  // prefill does not set; a pooling request (embeddings, rerank) has nothing to decode.
  if (rq_.api == Api::kResponses || rq_.api == Api::kPooling) {
    co_await sendError(400, "invalid_request",
                       std::string(rq_.api == Api::kResponses ? "the Responses API"
                                                              : "a pooling request (embeddings, "
                                                                "rerank, score, classify)") +
                           " is not served on a prefill/decode service; use "
                           "/v1/chat/completions or /v1/completions");
    co_return !client_gone_;
  }
  if (!pd_) pd_ = std::make_unique<PdState>(w_, static_cast<LegObserver&>(*this));
  PdState& st = *pd_;
  routing::RequestContext rctx =
      requestContext(req.head, rq_.facts_parsed ? &rq_.facts : nullptr, route, source_key_);
  rq_.cycle.beginRouting();
  rctx.cycle = &rq_.cycle;
  // DRAINING endpoints stay for now when the ladder has Tier 0: it may still send a pinned
  // conversation there (and takes them out for everything else).
  filterCandidates(route, rq_.excluded, 1, /*draining=*/!route.sessions);
  filterCandidates(route, st.decode_excluded, 2, false);
  routing::CandidateSet cands{route.endpoints, rq_.excluded};
  rq_.last_error.clear();
  const bool cb = route.rule.cb_enable;
  const PdDialect& dialect = pdDialect(*route.pd_dialect);
  // The admission gate (default off): may mask capped endpoints, park or answer.
  int granted = -1;  // a parked request's prefill endpoint (its slot in granted_lease)
  endpoints::EndpointLease granted_lease;
  if (route.admission.on()) {
    const int r = co_await admit(route, granted, granted_lease);
    if (r != 0) co_return r > 0 && !client_gone_;
  }
  struct Admitted {  // loxilb_ai_admission_inflight: this request, until it ends
    std::atomic<int64_t>& n;
    explicit Admitted(std::atomic<int64_t>& x) : n(x) { n.fetch_add(1); }
    ~Admitted() { n.fetch_sub(1); }
  } admitted{route.stats->admission_inflight};
  // Without any usable decode endpoint the prefill ladder does not run (nor count a tier): the
  // rescue serves the request. The decode pick follows the first prefill pick (Tier 0 may pin
  // it) and is kept when a prefill connect fails.
  endpoints::EndpointLease dlease;  // the decode pick's, until the second leg takes it
  int didx = -1;
  bool any_decode = false;
  for (bool x : st.decode_excluded) any_decode |= !x;
  bool tier_counted = false;
  bool prefill_redone = false;  // a push connector's prefill was redone for another decode
  for (size_t attempt = 0; any_decode && attempt < 2 * route.endpoints.size(); ++attempt) {
    routing::Decision d;
    endpoints::EndpointLease plase;
    if (granted >= 0) {  // parked, then handed a slot there: that is the pick
      rq_.cycle.releaseTokens();  // (no pipeline run needs the request's ids now)
      d.index = granted;
      plase = std::move(granted_lease);
      granted = -1;
      // Unless its breaker opened (or the controller took it out) while the request waited:
      // the slot goes on to the next parked request and the ladder picks. (An endpoint that
      // began DRAINING while the request waited keeps it, with or without Tier 0: the request
      // was accepted there before the drain, as one in flight is; the endpoints left are at
      // their caps, so the ladder would have nowhere to send it.)
      auto& s = *route.endpoints[static_cast<size_t>(d.index)].state;
      bool trial = false;
      if (s.controller(nowNs()).state == endpoints::ControllerState::kDisabled ||
          !s.health.admits(cb, trial)) {  // (in this order: admits may take a half-open trial)
        plase.reset();
        rq_.excluded[static_cast<size_t>(d.index)] = true;
        continue;
      }
      if (trial) plase.takeTrial();
    } else {
      d = co_await decide(route, *route.pipeline, rctx, cands);
      rq_.cycle.releaseTokens();
      if (d.index < 0) break;
      auto& s = *route.endpoints[static_cast<size_t>(d.index)].state;
      bool trial = false;
      if (!s.health.admits(cb, trial)) {
        rq_.excluded[static_cast<size_t>(d.index)] = true;
        continue;
      }
      plase = endpoints::EndpointLease(s, trial);
    }
    const size_t pidx = static_cast<size_t>(d.index);
    auto& pstate = *route.endpoints[pidx].state;
    if (d.track_chain && rq_.cycle.chain_ready) plase.addChain(rq_.cycle.chain);
    // The prefill leg's uncached blocks count as prefill queued on its endpoint until the engine
    // answers it (the prompt computed: a sample of its prefill rate) or the leg ends, for the
    // laws that read the queued prefill (ttft, predict-q's misses, dynamo-v1, llm-d-sticky).
    // Only Tier 1.5's estimate is counted (its picks, and Tier 2's after a Tier 1.5 miss): a
    // Tier 0 pin, a Tier 1 pick or a request handed a parked slot carries none (prefill_blocks 0).
    if (d.prefill_blocks > 0) plase.addPrefill(d.prefill_blocks, route.kv_block_tokens, nowNs());
    if (didx < 0) {
      didx = pinnedDecode(route, d.peer, dlease);
      if (didx < 0) didx = pickDecode(rctx, route, dlease);
      if (didx < 0) break;  // no decode endpoint admits the request: rescue
    }
    // Until the second leg starts, answers are the prefill endpoint's (counters, access log).
    rq_.outcome.ep_index = static_cast<int>(pidx);
    rq_.outcome.endpoint = &pstate.label;
    if (rctx.conversation_key && route.sessions)  // Tier 0: (re)pin the pair
      route.sessions->pin(
          *rctx.conversation_key, {pstate.id, route.endpoints[static_cast<size_t>(didx)].state->id},
          w_.opts.clock ? w_.opts.clock->nowNs() : common::SteadyClock::instance().nowNs());
    rq_.outcome.prefill = &pstate.label;
    rq_.outcome.key = routing::decisionKeyName(d.key);
    rq_.outcome.stage = d.stage >= 0 ? route.pipeline->stageName(d.stage).c_str() : "admission";
    rq_.outcome.spilled = d.spilled;
    rq_.outcome.matched_blocks = d.matched_blocks;
    rq_.trace.markRouted(std::chrono::steady_clock::now());
    // The legs' id names both transfer addresses and a fresh suffix of our own (the client's id
    // may repeat or carry ':' digits an engine would misparse); the client keeps its id.
    char fresh[32];
    newRequestId(fresh);
    st.id_suffix.assign(fresh, sizeof fresh);
    rq_.upstream_id = pd::pdRequestId(route.transfer_addr[pidx],
                                      route.transfer_addr[static_cast<size_t>(didx)], st.id_suffix);
    // The first leg's body (both legs' for a concurrent dialect).
    Result<std::string> first =
        dialect.firstBody(req.body, PdLegSite{pstate.ip, route.bootstrap_port, newRoom()});
    if (!first) {
      dlease.reset();
      co_await sendError(400, "invalid_request", first.error().what, "body");
      co_return !client_gone_;
    }
    st.first_body = std::move(*first);
    if (dialect.concurrent()) {
      countTier(route, d.stage);
      co_return co_await concurrentLegs(req, route, pidx, plase, rctx, dlease, didx);
    }
    buildUpstreamHead(req, route, st.first_body, st.head, st.host_at, /*identity=*/true, "prefill");
    setUpstreamHost(st.head, st.host_at, pstate.label);
    rq_.trace.attempt(st.head, &pstate.label, std::chrono::steady_clock::now());
    prefill_redone = false;  // (a new prefill: its own outcome decides the answer)
    LegAnswer a = co_await firstLeg(req, route, pidx, plase, st.first_body);
    rq_.trace.legEnded("prefill", std::chrono::steady_clock::now(), a.status);
    using K = LegAnswer::Kind;
    if (a.kind == K::kConnectFailed) {
      rq_.excluded[pidx] = true;
      continue;
    }
    if (!tier_counted) countTier(route, d.stage);  // the pick that served (connect failures
    tier_counted = true;                           // and a redone prefill are not counted)
    if (a.kind == K::kClientGone) co_return false;
    plase.reset();  // the prefill endpoint's part is over
    if (a.kind == K::kFailed) {
      stopWatch();
      dlease.reset();
      const std::string msg = "prefill leg to " + pstate.label + ": " + a.error;
      co_await sendError(a.status, "prefill_failed", msg);
      co_return true;
    }
    if (a.status < 200 || a.status > 299) {  // the engine refused it: its answer is the answer
      stopWatch();
      dlease.reset();
      co_return co_await answerWith(a.status, st.content_type, st.answer);
    }
    PdAfterFirst next = dialect.afterFirst(req.body, st.answer, rq_.facts.stream.value_or(false));
    if (next.kind == PdAfterFirst::Kind::kFinalAnswer) {  // generation is over already
      stopWatch();
      dlease.reset();
      st.answer = std::move(next.body);
      co_return co_await answerWith(200, next.content_type, st.answer);
    }
    if (next.kind == PdAfterFirst::Kind::kError) {
      stopWatch();
      dlease.reset();
      co_await sendError(502, "bad_upstream_response",
                         "prefill leg to " + pstate.label + ": " + next.error);
      co_return true;
    }
    const bool kv_follows_id = next.kv_follows_id;
    st.second_body = std::move(next.body);
    bool redo = false;
    const bool ok = co_await secondLeg(req, route, pidx, rctx, st.second_body, dlease, didx,
                                       kv_follows_id ? &redo : nullptr);
    if (!redo) co_return ok;
    // The decode endpoint the KV was pushed to was unreachable: the prefill is redone under a
    // new id naming the next decode endpoint (its first transfer went nowhere).
    didx = -1;
    any_decode = false;
    for (bool x : st.decode_excluded) any_decode |= !x;
    prefill_redone = true;
    if (!any_decode) break;
    route.stats->pd_prefill_redone.fetch_add(1, std::memory_order_relaxed);
    log::warn("proxy", "decode endpoint unreachable after a pushed prefill on " + pstate.label +
                           ": the prefill is redone for the next decode endpoint");
  }
  if (prefill_redone) {  // (a pushed prefill and no decode endpoint left: not the rescue)
    dlease.reset();
    co_return co_await answerNoDecode();
  }
  // No prefill/decode pair: the any-healthy rescue over role-less endpoints.
  dlease.reset();
  rq_.upstream_id.clear();
  rq_.outcome.ep_index = -1;
  rq_.outcome.prefill = nullptr;
  rq_.outcome.endpoint = nullptr;
  rq_.outcome.matched_blocks = -1;  // (the rescue's pick says its own)
  if (route.rescue_pipeline) {
    countTier(route, -2);
    co_return co_await forward(req, route, route.rescue_pipeline.get(), 0);
  }
  stopWatch();
  const bool tried = !rq_.last_error.empty();
  const std::string message =
      tried ? "prefill leg: " + rq_.last_error : std::string("no healthy prefill/decode pair");
  co_await sendError(tried ? 502 : 503, tried ? "upstream_connect_failed" : "no_healthy_upstream",
                     message);
  co_return true;
}

}  // namespace kvgate::proxy
