// ClientConn: one client connection of the mode-4 fullproxy (internal to src/proxy).
//
// Files: connection.cc (the request loop: head, body, drain), dispatch.cc (request facts, pool
// lookup, the gateway's own answers), forward.cc (routing pipeline and upstream legs),
// pd_forward.cc (P/D rules: the prefill and decode picks, the dialects' two legs, rescue),
// relay.cc (the response relay, SSE), conn_io.cc (deadline, client writes, errors, the
// client-disconnect watcher, access log).
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/ssl.hpp>

#include "endpoints/lease.h"
#include "governance/quota.h"
#include "governance/usage.h"
#include "metrics/ai_requests.h"
#include "http/chunked.h"
#include "http/fd_tls.h"
#include "http/parser.h"
#include "http/target.h"
#include "proxy/buffer.h"
#include "proxy/upstream_leg.h"
#include "proxy/worker.h"
#include "routing/request_facts.h"

namespace kvgate::http {
class TlsFiles;
}

namespace kvgate::proxy {

using Clock = std::chrono::steady_clock;
// Client reads ask for at least this much room; a buffer that fills doubles (bodies), so small
// requests and idle streams keep one page per connection.
constexpr size_t kReadChunk = 4 * 1024;
// Client bytes the watcher may hold while a response is relayed (a pipelined next request);
// beyond it the watcher stops reading and TCP pushes back on the client.
constexpr size_t kMaxPipelinedBytes = 64 * 1024;
// Buffer capacity a connection keeps between requests; larger allocations are freed.
constexpr size_t kKeepBufferBytes = 256 * 1024;

// An OpenAI-style error body: {"error":{"message","type","param","code"}}.
std::string openAiError(int status, std::string_view code, std::string_view message,
                        std::string_view param = {});

class ClientConn : public std::enable_shared_from_this<ClientConn>, private LegObserver {
 public:
  ClientConn(Worker& w, std::shared_ptr<Listener> l, tcp::socket s);  // (pd_forward.cc)
  void setPeer(const tcp::endpoint& peer) { peer_ = peer; }  // before run()
  ~ClientConn();

  asio::awaitable<void> run();
  // Shutdown (worker thread): a connection idle between requests closes now; one with a request
  // in flight closes after answering it.
  void onDrain();

 private:
  enum class Phase { kIdle, kHead, kBody, kConnect, kAwaitResponse, kRelay, kStream };

  // The request being served: head, body bytes and what the gateway decided about it.
  struct Request {
    http::RequestHead head;
    size_t head_bytes = 0;
    size_t raw_body_bytes = 0;  // body bytes still in in_ (chunked bodies: dropped as scanned)
    std::string_view body;      // the payload (de-chunked when chunked)
    size_t body_capacity = 0;   // readable bytes from body.data() (parser padding)
  };

  struct Outcome {
    int status = 0;
    uint64_t bytes = 0;
    const std::string* endpoint = nullptr;  // label of the chosen endpoint (owned by the route)
    const char* key = "";                   // which key decided
    const char* stage = "";                 // which pipeline stage decided (access-log tier)
    bool spilled = false;
    const Route* route = nullptr;  // set once the request's rule is known
    int ep_index = -1;             // set once an endpoint is chosen (P/D: the decode endpoint)
    const std::string* prefill = nullptr;  // P/D: label of the prefill endpoint
    double ttfb_ms = -1;     // first response byte to the client (stream: first event)
    std::string_view model;  // the model the pool lookup used
    // Who the credential check admitted (governance): the API key's id and tenant, or the
    // JWT's tenant and user claims (each at most 256 bytes). Empty: no check, or refused.
    std::string key_id, tenant, user;
    int64_t quota_tokens = -1;  // tokens a quota settlement charged (-1: none)
    // loxilb_ai_requests_total's outcome: an engine's answer was relayed (completed), or a
    // governance/admission gate refused (denied); else the gateway's own error (failed) or none.
    bool engine_answered = false, denied = false;
  };

  // connection.cc
  asio::awaitable<int> readHead(http::RequestHead& head);  // >0 head bytes, 0 closed, <0 answered
  asio::awaitable<bool> readBody(Request& req);
  asio::awaitable<bool> readChunkedBody(Request& req);
  void reparseHeadIfMoved(Request& req, const char* head_base);
  // dispatch.cc
  asio::awaitable<bool> dispatch(Request& req);
  asio::awaitable<bool> answerModels(const VipConfig& cfg, std::string_view host,
                                     std::string_view path,
                                     const std::vector<std::string>* allowed = nullptr);
  // api_key_auth "required": the key (X-Api-Key or Authorization: Bearer) checked against the
  // current key table, then (check_model) the model against the key's allowed models, which go
  // to `models` when given ("*": any). status 0: admitted; else the error to answer.
  struct KeyAdmission {
    int status = 0;
    std::string code, message, param;
    int64_t retry_after_s = 0;  // a 429's Retry-After
    static KeyAdmission refused(int status, std::string code, std::string message) {
      KeyAdmission a;
      a.status = status;
      a.code = std::move(code);
      a.message = std::move(message);
      return a;
    }
  };
  KeyAdmission checkApiKey(const http::RequestHead& head, std::string_view model, bool check_model,
                           std::vector<std::string>* models);
  KeyAdmission checkJwt(const http::RequestHead& head, const std::string& profile);
  asio::awaitable<bool> answerUnroutable(const Route* route, bool host_path_matched,
                                         std::string_view model);
  // quota_gate.cc
  // The quota stage: the request's buckets reserve (status 0, quota_ holds the reservation) or
  // the 429 to answer. `body` is the client's (include_usage may be added into quota_body_).
  int64_t promptCount();  // quota_gate.cc
  asio::awaitable<KeyAdmission> admitQuota(const Route& route, std::string_view model,
                                           const Request& req);
  // Returns the reservation and charges the usage the relay saw, or an estimate (once).
  void settleQuota();
  void resetQuota();  // per request
  struct QuotaState {
    bool active = false;  // holds a reservation not yet settled
    bool inject = false;  // include_usage was added for the gateway (the relay strips it)
    bool sent = false;    // the request was written to an engine
    bool stream = false;  // the answer is an event stream
    bool shared = false;  // the reservation is in the shared counters (Redis)
    bool head_request = false;
    bool generation = false;  // the body carried a prompt (an answer without usage is charged)
    int status = 0;       // the engine's answer status (0: none)
    int64_t prompt_estimate = 0, reserved = 0;
    std::vector<governance::QuotaLedger::Held> held;
  };
  // forward.cc
  // `pipeline` null: the route's; `role` >= 0: only endpoints of that ep_role are candidates.
  asio::awaitable<bool> forward(const Request& req, const Route& route,
                                const routing::Pipeline* pipeline = nullptr, int role = -1);
  // The upstream request head for `body` (the client's, or a P/D leg's rewritten one) into
  // `out`; `host_at` is where setUpstreamHost puts a Host header (npos: the client sent one).
  // `identity`: ask for an uncompressed answer (a P/D first leg, which the gateway reads).
  void buildUpstreamHead(const Request& req, const Route& route, std::string_view body,
                         std::string& out, size_t& host_at, bool identity = false);
  static void setUpstreamHost(std::string& head, size_t host_at, std::string_view label);
  void maskUnhealthy(const Route& route, std::vector<bool>& excluded, int role,
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
  asio::awaitable<void> answerPrefillFailure();
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
  asio::awaitable<void> drainPrefill(std::shared_ptr<ClientConn> self,
                                     std::shared_ptr<const VipConfig> cfg, const Route* route,
                                     size_t idx, std::shared_ptr<UpstreamLeg> leg,
                                     endpoints::EndpointLease lease, std::string head,
                                     std::string body, uint64_t request_seq);
  // Every open upstream leg of the current request: the deadline (`timeout`) or the client
  // leaving; an SGLang prefill drain only when it is the current request's and the client left.
  void abortLegs(bool timeout);
  void pdAfterRequest();  // P/D scratch: drop what one request made big (pd_forward.cc)
  // relay.cc
  struct RelayFraming {  // the response body's framing and progress
    http::BodyKind kind = http::BodyKind::kNone;
    bool dechunk = false;  // chunked upstream, HTTP/1.0 client: relay the payload only
    bool decode = false;   // chunked upstream: also decode the payload into `decoded` (usage)
    uint64_t remaining = 0;
    bool complete = false;
    bool reusable = false;  // the upstream connection may be pooled afterwards
    http::ChunkedScanner sc;
    std::string decoded;
  };
  // `lease`'s queued prefill is given back at the first body byte.
  asio::awaitable<bool> relayResponse(const http::ResponseHead& rh, const Route& route,
                                      bool head_request, endpoints::EndpointLease& lease);
  // `rewrite`: the body is re-framed by the gateway (no Content-Length; chunked to HTTP/1.1).
  void buildDownstreamHead(const http::ResponseHead& rh, bool dechunk, bool rewrite = false);
  bool nextChunk(RelayFraming& f, std::string_view& chunk);
  std::string_view frameRewritten(std::string& piece, bool last);
  void noteFirstBytes(const Route& route, bool& ttft_pending, bool had_payload);
  bool abandonRelay(RelayCut why);
  void takeRequestId(const http::RequestHead& head);  // dispatch.cc  // counted in kvgate_relay_cuts_total{reason}
  void releaseRequestBytes();
  // conn_io.cc
  void onDeadline();
  void onUpstreamWait() override;
  void onTick();
  asio::awaitable<bool> readMore(Buffer& b, tcp::socket& s);
  // TLS (a listener with security 1 rules): the handshake; then every client read and write goes
  // through tls_. False: the handshake failed (counted, the connection closes).
  asio::awaitable<bool> acceptTls(const http::TlsFiles& files,
                                  const std::shared_ptr<asio::ssl::context>& ctx);
  asio::awaitable<error_code> tlsWrite(std::string_view a, std::string_view b);
  void countResponse(int status);
  void logAccess();
  void countAiRequest();  // loxilb_ai_requests_total, once per request (metrics/ai_requests.h)
  std::string_view aiModelLabel() const;
  // Headers the request's rule adds to every answer (HSTS on TLS rules); "" before routing.
  std::string_view ruleHeaders() const {
    return outcome_.route ? std::string_view(outcome_.route->rule.hsts_header) : std::string_view();
  }  // loxilb_ai_requests_total, once per request (metrics/ai_requests.h)
  std::string_view bodyModelOr(const Request& req, std::string_view header_model) const;
  static bool jsonBody(std::string_view content_type);
  void refuse(Refusal r);  // counts a refusal of an unreadable request (rule_stats.h)
  // retry_after_s > 0: a Retry-After header (429 of a key's rate limit).
  asio::awaitable<void> sendError(int status, std::string_view code, std::string_view msg,
                                  std::string_view param = {}, bool close = false,
                                  int64_t retry_after_s = 0);
  asio::awaitable<bool> writeClient(std::string_view a, std::string_view b = {});
  void startWatch();
  void armWatch(uint64_t gen);
  void stopWatch();
  void closeClient() {  // (close alone: a shutdown first would only add a syscall)
    error_code ec;
    client_.close(ec);
  }
  bool keepAliveAfter() const { return client_keep_alive_ && !w_.draining && !l_->closed.load(); }

  Worker& w_;
  std::shared_ptr<Listener> l_;
  tcp::socket client_;
  // (the context, and the client-certificate check its ex data points to, live while tls_ does)
  std::shared_ptr<asio::ssl::context> tls_ctx_;
  std::unique_ptr<http::FdTls> tls_;  // OpenSSL on client_'s descriptor (http/fd_tls.h)
  bool relay_cut_ = false;          // a response was cut short: no close_notify (it would say
                                    // the body ended)
  UpstreamLeg leg_;
  Deadline deadline_;
  Phase phase_ = Phase::kIdle;
  Buffer in_;  // client bytes
  bool client_keep_alive_ = true;
  int client_minor_ = 1;
  std::chrono::milliseconds idle_timeout_{0};
  // Client-disconnect watcher state.
  bool watch_wanted_ = false;  // the upstream made the current request wait
  bool watching_ = false;
  bool watch_running_ = false;
  bool client_gone_ = false;
  bool client_eof_ = false;  // a TLS read of the client met EOF or an error
  uint64_t watch_gen_ = 0;
  uint64_t source_key_ = 0;  // hash of the client's address (hash, persist fallback)
  tcp::endpoint peer_;       // the client's address, as accept gave it (setPeer)
  std::chrono::steady_clock::time_point started_at_;  // when the current request's head arrived
  std::string pipelined_;  // client bytes the watcher read during a response (bounded)
  // Per-request scratch kept across requests so a warm connection allocates nothing for them.
  std::shared_ptr<const VipConfig> cfg_;  // the snapshot this request was routed with
  size_t request_bytes_ = 0;              // bytes of the current request in in_ (head + raw body)
  std::string model_copy_;                // outcome_.model when the request bytes were released
  routing::RequestFacts facts_;
  http::NormalizedTarget norm_target_;  // a non-canonical target rewritten (http/target.h)
  // The body's model as the engine reads it (dispatch.cc): read at all (a JSON object, or a
  // form's model field), and the model it names (into facts_.model or form_model_).
  bool body_read_ = false, body_has_model_ = false;
  std::string_view body_model_;
  std::string form_model_;
  bool facts_parsed_ = false;
  bool strip_authorization_ = false;  // a credential-checked rule: no bearer reaches the engine
  std::shared_ptr<const governance::ApiKey> key_;  // the API key that admitted the request
  QuotaState quota_;
  governance::UsageScanner usage_;       // the response's usage (quota settlement)
  governance::SseUsageFilter usage_filter_;
  std::string quota_body_;  // the body with include_usage added (quota_.inject)
  std::string relay_out_;   // a re-framed piece of the response (quota_.inject)
  std::string dechunked_;
  std::string request_id_;
  std::string up_head_;
  size_t up_host_at_ = std::string::npos;  // where an added Host header goes (HTTP/1.0 clients)
  std::string down_head_;
  std::unique_ptr<PdState> pd_;  // P/D scratch (the first leg, rewritten bodies): made on first use
  std::string pd_leg_note_;      // P/D: which leg an error answer is about ("" = single leg)
  std::string pd_first_error_;   // P/D (concurrent): the prefill leg failed, so the decode leg ends
  std::string leg_id_;           // P/D: the X-Request-Id of the current leg ("" = request_id_)
  uint64_t request_seq_ = 0;     // requests dispatched on this connection (the drain's guard)
  http::ResponseHead resp_head_;  // the current response's head (views into the leg's buffer)
  std::vector<bool> excluded_;
  // The request's prompt ids (quota count and kv_exact share them) and kv_exact's chain, which
  // its retries reuse; cleared after each request.
  routing::CycleState cycle_;  // what this request's routing computes once (routing/cycle_state.h)
  std::string last_error_;           // why the last endpoint tried could not serve (502 message)
  Outcome outcome_;
};

}  // namespace kvgate::proxy
