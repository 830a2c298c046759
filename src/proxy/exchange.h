// Exchange: one request of the mode-4 fullproxy, from its parsed head to its logged end
// (internal to src/proxy), whatever the client's wire protocol: it talks to the client through a
// ClientSide (client_side.h) that its connection implements: ClientConn (client_conn.h) for
// HTTP/1.x, which keeps one Exchange for the requests it serves one after another, and the
// HTTP/2 connection (h2/h2_conn.h), which makes one per stream.
//
// Phases, a file each: exchange.cc (the gates before the body, the body, dispatch, counting and
// logging; a stream's request; the client leaving), dispatch.cc (request facts, pool lookup, the
// gateway's own answers, the rule's request filters of filters/), forward.cc (routing pipeline
// and upstream legs), pd_forward.cc (P/D rules: the prefill and decode picks, the dialects' two
// legs, rescue), relay.cc (the response relay, SSE), relay_sockmap.cc (a body spliced by the
// kernel), exchange_io.cc (deadline, the gateway's own answers, counting, the access log),
// conn_trace.cc (a sampled request's spans). The request's own state is a RequestCtx
// (request_ctx.h), begun afresh for each request.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "endpoints/lease.h"
#include "governance/quota.h"
#include "governance/usage.h"
#include "http/chunked.h"
#include "http/parser.h"
#include "http/target.h"
#include "metrics/ai_requests.h"
#include "proxy/buffer.h"
#include "proxy/client_side.h"
#include "proxy/request_ctx.h"
#include "proxy/upstream_leg.h"
#include "proxy/worker.h"
#include "routing/request_facts.h"
#include "sockmap/sockmap_relay.h"

namespace kvgate::proxy {

using Clock = std::chrono::steady_clock;
// Client reads ask for at least this much room; a buffer that fills doubles (bodies), so small
// requests and idle streams keep one page per connection.
constexpr size_t kReadChunk = 4 * 1024;
// Buffer capacity a connection keeps between requests; larger allocations are freed.
constexpr size_t kKeepBufferBytes = 256 * 1024;

// An OpenAI-style error body: {"error":{"message","type","param","code"}}.
std::string openAiError(int status, std::string_view code, std::string_view message,
                        std::string_view param = {});

class Exchange : public std::enable_shared_from_this<Exchange>, private LegObserver {
 public:
  // Where the request is (the deadline's action and the drain read it): the connection's
  // phases (idle between requests, reading the head or the body), then the request path's.
  enum class Phase { kIdle, kHead, kBody, kConnect, kAwaitResponse, kRelay, kStream };

  // `client` outlives the request path's use of it (detachClient() ends that use).
  Exchange(Worker& w, std::shared_ptr<Listener> l, ClientSide& client);  // (pd_forward.cc)
  ~Exchange();
  void setPeer(const tcp::endpoint& peer);  // the client's address: the source key (hash, persist)

  // The deadline (one per exchange: HTTP/1.x's connection phases use it too): its actions run
  // from startDeadline() until deadline().stop().
  void startDeadline();
  Deadline& deadline() { return deadline_; }
  Phase phase() const { return phase_; }
  void setPhase(Phase p) { phase_ = p; }

  // A request begins (its head is in): nothing of the last one is left (request_ctx.h), and a
  // P/D prefill drain still running for the last one no longer writes into this one's state
  // (pd_forward.cc compares requestSeq()).
  void begin();
  uint64_t requestSeq() const { return request_seq_; }
  // One request whose head is parsed (`req.head_bytes` set): the gates before its body, the
  // body (ClientSide::readBody), dispatch, counting and logging. False: the connection must close.
  asio::awaitable<bool> serve(Request& req);
  // A multiplexed stream's one request: `request` is its HTTP/1.1 head text and body
  // (h2/bridge.h), served whole; the client side is finished before this returns.
  asio::awaitable<void> runStream(std::string request);
  // The client left (a watcher saw the close, the stream was reset): the engine request is
  // aborted.
  void clientLeft();
  // The client side is going away: nothing reaches it from here on (work of this exchange
  // that outlives it, a P/D prefill drain, writes to nobody).
  void detachClient();
  bool clientGone() const { return client_gone_; }
  bool relayCut() const { return relay_cut_; }  // an answer was cut short (no TLS close_notify)

  // An error answer in the request's API shape (the connection's own too: a body refused).
  // retry_after_s > 0: a Retry-After header (429 of a key's rate limit).
  asio::awaitable<void> sendError(int status, std::string_view code, std::string_view msg,
                                  std::string_view param = {}, bool close = false,
                                  int64_t retry_after_s = 0);
  // A head the parser refused (after begin()): its 4xx, and the request counted and logged.
  asio::awaitable<void> refuseHead(const http::ParseError& perr);
  // The client watcher stops (no watcher outlives the wait it was for: it would read the next
  // request).
  void stopWatch();
  // Every open upstream leg of the current request: the deadline (`timeout`) or the client
  // leaving; an SGLang prefill drain only when it is the current request's and the client left.
  void abortLegs(bool timeout);
  void noteFailure(const std::string& what);  // a request path threw: logged, counted

 private:
  // dispatch.cc
  asio::awaitable<bool> dispatch(Request& req);
  asio::awaitable<bool> answerModels(const VipConfig& cfg, std::string_view host,
                                     std::string_view path,
                                     const std::vector<std::string>* allowed = nullptr);
  asio::awaitable<bool> answerUnroutable(const Route* route, bool host_path_matched,
                                         std::string_view model);
  // /tokenize, /detokenize (tokenize_local.h): 0 = forward it (rq_.tok_check set when its answer
  // is to be checked), 1 = answered here, 2 = answered, and the connection must close.
  asio::awaitable<int> tokenizeLocally(const Request& req, const Route& route);
  // forward.cc
  // `pipeline` null: the route's; `role` >= 0: only endpoints of that ep_role are candidates.
  asio::awaitable<bool> forward(const Request& req, const Route& route,
                                const routing::Pipeline* pipeline = nullptr, int role = -1);
  // The upstream request head for `body` (the client's, or a P/D leg's rewritten one) into
  // `out`; `host_at` is where setUpstreamHost puts a Host header (npos: the client sent one).
  // `identity`: ask for an uncompressed answer (a P/D first leg, which the gateway reads).
  // `leg_role` names the leg in its trace span ("", "prefill", "decode"; request_trace.h).
  void buildUpstreamHead(const Request& req, const Route& route, std::string_view body,
                         std::string& out, size_t& host_at, bool identity = false,
                         const char* leg_role = "");
  static void setUpstreamHost(std::string& head, size_t host_at, std::string_view label);
  // The rule's candidate filters (routing/eligibility/eligibility.h) into `excluded`.
  void filterCandidates(const Route& route, std::vector<bool>& excluded, int role,
                        bool draining = true) const;
  int64_t nowNs() const;  // the data plane's clock
  // timeoutMemberConnect (0 = 500 ms) and timeoutMemberData (0 = --upstream-data-timeout-ms).
  static std::chrono::milliseconds connectTimeout(const config::RuleSpec& rule) {
    return std::chrono::milliseconds(rule.timeout_connect_ms > 0 ? rule.timeout_connect_ms : 500);
  }
  std::chrono::milliseconds dataTimeout(const config::RuleSpec& rule) const {
    return rule.timeout_data_ms > 0 ? std::chrono::milliseconds(rule.timeout_data_ms)
                                    : w_.opts.upstream_data_timeout;
  }
  asio::awaitable<bool> exchange(const Request& req, std::string_view body, const Route& route,
                                 size_t idx, endpoints::EndpointLease& lease, bool& next_endpoint);
  static constexpr int kStarvedConnectTries = 10;  // connectLeg: 100 ms apart
  bool starvedLogDue() {  // at most one starved-connect log line every 10 s per worker
    const auto now = std::chrono::steady_clock::now();
    if (now - w_.starved_logged < std::chrono::seconds(10)) return false;
    w_.starved_logged = now;
    return true;
  }
  asio::awaitable<UpstreamLeg::Result> connectLeg(UpstreamLeg& leg, const Route& route, size_t idx);
  asio::awaitable<bool> failExchange(const UpstreamLeg::Result& r, const Route& route, size_t idx,
                                     endpoints::EndpointLease& lease);
  asio::awaitable<UpstreamLeg::Result> readFinalHead(std::string_view method,
                                                     http::ResponseHead& rh);
  // pd_forward.cc
  struct PdState;
  struct LegAnswer;
  asio::awaitable<bool> forwardPd(const Request& req, const Route& route);
  // The admission gate: 0 go on (`granted` >= 0: a parked request's prefill endpoint, its slot
  // in `granted_lease`), 1 answered, -1 the client is gone.
  asio::awaitable<int> admit(const Route& route, int& granted,
                             endpoints::EndpointLease& granted_lease);
  asio::awaitable<int> park(const Route& route, size_t idx, const std::vector<size_t>& siblings,
                            endpoints::EndpointLease& lease, int& granted);
  asio::awaitable<void> sendAdmission(const Route& route, int status, std::string_view code,
                                      std::string_view message, std::string_view extra,
                                      int64_t limit);
  int pickDecode(const routing::RequestContext& rctx, const Route& route,
                 endpoints::EndpointLease& lease);
  int pinnedDecode(const Route& route, int peer, endpoints::EndpointLease& lease);
  void countTier(const Route& route, int stage);
  // Another leg of the request failed (rq_.sibling_failure), ending this one: its answer (a P/D
  // prefill's: pd_forward.cc).
  asio::awaitable<void> answerSiblingFailure();
  // Runs `pipeline`; when a stage asks for the remote index's answer (kvIndexAddr), asks it
  // (proxy/remote_hint.h) and runs again.
  asio::awaitable<routing::Decision> decide(const Route& route, const routing::Pipeline& pipeline,
                                            const routing::RequestContext& rctx,
                                            routing::CandidateSet& cands);
  asio::awaitable<LegAnswer> firstLeg(const Request& req, const Route& route, size_t idx,
                                      endpoints::EndpointLease& lease, std::string_view body);
  asio::awaitable<bool> answerWith(int status, std::string_view content_type,
                                   std::string_view body);
  // redo_prefill (a push connector: the KV follows the request id to the decode it names): set
  // instead of moving to another decode endpoint when the first is unreachable.
  asio::awaitable<bool> secondLeg(const Request& req, const Route& route, size_t prefill_idx,
                                  const routing::RequestContext& rctx, std::string_view body,
                                  endpoints::EndpointLease& first_lease, int first_idx,
                                  bool* redo_prefill = nullptr);
  asio::awaitable<bool> answerNoDecode();
  asio::awaitable<bool> concurrentLegs(const Request& req, const Route& route, size_t pidx,
                                       endpoints::EndpointLease& plase,
                                       const routing::RequestContext& rctx,
                                       endpoints::EndpointLease& dlease, int didx);
  asio::awaitable<void> drainPrefill(std::shared_ptr<Exchange> self,
                                     std::shared_ptr<const VipConfig> cfg, const Route* route,
                                     size_t idx, std::shared_ptr<UpstreamLeg> leg,
                                     endpoints::EndpointLease lease, std::string head,
                                     std::string body, uint64_t request_seq);
  void pdAfterRequest();  // P/D scratch: drop what one request made big (pd_forward.cc)
  // relay.cc
  struct RelayFraming {  // the response body's framing and progress
    http::BodyKind kind = http::BodyKind::kNone;
    bool dechunk = false;  // chunked upstream, HTTP/1.0 client: relay the payload only
    bool decode = false;   // chunked upstream: also decode the payload into `decoded` (usage)
    uint64_t remaining = 0;
    bool complete = false;
    bool splice_tried = false;  // the sockmap relay was asked for this body
    bool reusable = false;      // the upstream connection may be pooled afterwards
    http::ChunkedScanner sc;
    std::string decoded;
  };
  // `lease`'s queued prefill is given back at the first body byte.
  asio::awaitable<bool> relayResponse(const http::ResponseHead& rh, const Route& route,
                                      bool head_request, endpoints::EndpointLease& lease);
  // `rewrite`: the body is re-framed by the gateway (no Content-Length; chunked to HTTP/1.1).
  void buildDownstreamHead(const http::ResponseHead& rh, bool dechunk, bool rewrite = false);
  void buildDownstreamFields(const http::ResponseHead& rh, bool rewrite);  // (a stream's head)
  // The rule's headers (ruleHeaders(): "Name: value" lines) added to `h`.
  void addRuleHeaders(HeadFields& h) const;
  // The gateway's own answer (an error, an admission refusal, a list of models, a relayed P/D
  // answer): its head as fields in own_fields_, from ownHead(status) on. writeAnswer sends it
  // and `body` (none to a HEAD request: the head keeps its Content-Length) to either client: as
  // fields to a multiplexed stream, as HTTP/1.1 text otherwise (names in their usual case, and
  // Connection: close when the connection ends after it).
  HeadFields& ownHead(int status) {
    own_fields_.clear();
    own_fields_.status = status;
    return own_fields_;
  }
  asio::awaitable<bool> writeAnswer(std::string_view body);
  template <class Add>
  bool downstreamFields(const http::ResponseHead& rh, bool rewrite, Add&& add) const;
  bool nextChunk(RelayFraming& f, std::string_view& chunk);
  std::string_view frameRewritten(std::string& piece, bool last);
  void noteFirstBytes(const Route& route, bool& ttft_pending, bool had_payload);
  // relay_sockmap.cc: a sockMapMode rule's Content-Length body spliced by the kernel: 1 relayed
  // (f complete; f.reusable cleared when the engine sent bytes after it), 0 not (the caller relays
  // it), -1 cut (why in `cut`).
  bool spliceWanted(const RelayFraming& f, const Route& route, bool stream, bool head_request);
  asio::awaitable<int> spliceBody(RelayFraming& f, const Route& route, RelayCut& cut);
  bool abandonRelay(RelayCut why);  // counted in kvgate_relay_cuts_total{reason}
  void releaseRequestBytes();
  void takeRequestId(const http::RequestHead& head);  // (dispatch.cc)
  // exchange_io.cc
  void countAiRequest();  // loxilb_ai_requests_total, once per request (metrics/ai_requests.h)
  void logAccess();
  void countAndLog() {  // a request that ends here (--access-log: its line)
    countAiRequest();
    if (w_.opts.access_log) logAccess();
  }
  void onDeadline();
  void onUpstreamWait() override;
  void onTick();
  void countResponse(int status);
  void finishTrace();  // a sampled request's spans to the tracer (conn_trace.cc)
  std::string_view aiModelLabel() const;
  // Headers the request's rule adds to every answer (HSTS on TLS rules); "" before routing.
  std::string_view ruleHeaders() const {
    return rq_.outcome.route ? std::string_view(rq_.outcome.route->rule.hsts_header)
                             : std::string_view();
  }
  std::string_view bodyModelOr(const Request& req, std::string_view header_model) const;
  static bool jsonBody(std::string_view content_type);
  void refuse(Refusal r);  // counts a refusal of an unreadable request (rule_stats.h)
  std::string errorBody(int status, std::string_view code, std::string_view message,
                        std::string_view param = {}) const;  // in the request's API shape
  asio::awaitable<bool> writeClient(std::string_view a, std::string_view b = {}) {
    return client_->write(a, b);
  }
  void closeClient() { client_->close(); }
  asio::any_io_executor executor() { return w_.io.get_executor(); }

  Worker& w_;
  std::shared_ptr<Listener> l_;
  ClientSide* client_;      // the client's end (detachClient: a side that takes nothing)
  bool relay_cut_ = false;  // a response was cut short: no close_notify (it would say the body
                            // ended)
  UpstreamLeg leg_;
  Deadline deadline_;
  Phase phase_ = Phase::kIdle;
  bool watch_wanted_ = false;  // the upstream made the current request wait (onTick watches)
  bool client_gone_ = false;
  uint64_t source_key_ = 0;  // hash of the client's address (hash, persist fallback)
  Buffer stream_in_;         // a stream's request bytes (runStream; HTTP/1.x: the connection's)
  // The request being served (request_ctx.h): one per exchange, reused so a warm HTTP/1.1
  // connection allocates nothing for it.
  RequestCtx rq_;
  std::string down_head_;        // the response head to an HTTP/1.x client
  HeadFields down_fields_;       // ... as fields, to a multiplexed stream
  HeadFields own_fields_;        // the head of the gateway's own answer (ownHead)
  std::unique_ptr<PdState> pd_;  // P/D scratch (the first leg, rewritten bodies): made on first use
  uint64_t request_seq_ = 0;     // requests begun on this exchange (the drain's guard)
};

}  // namespace kvgate::proxy
