// RequestCtx: the state of one request the gateway serves (internal to src/proxy).
//
// A connection frames bytes into a Request (the head and the body); what the gateway reads,
// decides and holds for that request lives in a RequestCtx: the rule snapshot it was routed with,
// its facts and model, who was admitted (identity), the quota reservation, the routing cycle
// state, the upstream head, the outcome that metrics and the access log report, and its timings.
// begin() starts a request with nothing left of the previous one (the one place the state is
// reset); end() drops what one request made big. An HTTP/1.1 connection serves one request at a
// time and reuses one RequestCtx, so a warm connection allocates nothing for it (strings keep
// their capacity); a multiplexed connection keeps one per open stream.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "governance/quota.h"
#include "governance/usage.h"
#include "http/parser.h"
#include "http/target.h"
#include "proxy/request_trace.h"
#include "proxy/route_table.h"
#include "proxy/tokenize_local.h"
#include "routing/cycle_state.h"
#include "routing/request_facts.h"

namespace kvgate::governance {
struct ApiKey;
}

namespace kvgate::proxy {

// The request as the client sent it: head, body bytes (views into the connection's buffers).
struct Request {
  http::RequestHead head;
  size_t head_bytes = 0;
  size_t raw_body_bytes = 0;  // body bytes still in the read buffer (chunked: dropped as scanned)
  std::string_view body;      // the payload (de-chunked when chunked)
  size_t body_capacity = 0;   // readable bytes from body.data() (parser padding)
};

// What was answered and why: read by the metrics, loxilb_ai_requests_total and the access log.
struct RequestOutcome {
  int status = 0;
  uint64_t bytes = 0;
  const std::string* endpoint = nullptr;  // label of the chosen endpoint (owned by the route)
  const char* key = "";                   // which key decided
  const char* stage = "";                 // which pipeline stage decided (access-log tier)
  bool spilled = false;
  const Route* route = nullptr;  // set once the request's rule is known
  int ep_index = -1;             // set once an endpoint is chosen (P/D: the decode endpoint)
  const std::string* prefill = nullptr;  // P/D: label of the prefill endpoint
  double ttfb_ms = -1;                   // first response byte to the client (stream: first event)
  int32_t matched_blocks = -1;  // Tier 1.5's pick: leading prompt blocks held there (-1: none)
  std::string_view model;                // the model the pool lookup used
  // Who the credential check admitted (governance): the API key's id and tenant, or the
  // JWT's tenant and user claims (each at most 256 bytes). Empty: no check, or refused.
  std::string key_id, tenant, user;
  std::string jwt_profile;    // the JWT profile that admitted it ("" none)
  int64_t quota_tokens = -1;  // tokens a quota settlement charged (-1: none)
  // loxilb_ai_requests_total's outcome: an engine's answer was relayed (completed), or a
  // governance/admission gate refused (denied); else the gateway's own error (failed) or none.
  bool engine_answered = false, denied = false;
};

// The quota filter's reservation and what settlement needs to know (filters/quota.cc).
struct QuotaState {
  bool active = false;  // holds a reservation not yet settled
  bool inject = false;  // include_usage was added for the gateway (the relay strips it)
  bool sent = false;    // the request was written to an engine
  bool stream = false;  // the answer is an event stream
  bool shared = false;  // the reservation is in the shared counters (Redis)
  bool head_request = false;
  bool generation = false;  // the body carried a prompt (an answer without usage is charged)
  int status = 0;           // the engine's answer status (0: none)
  int64_t prompt_estimate = 0, reserved = 0;
  std::vector<governance::QuotaLedger::Held> held;
};

// The API a request speaks, by its path: errors answer in its shape (Anthropic's on the Messages
// paths), and its prompt is read in its form (proxy/api_facts.h).
enum class Api : uint8_t {
  kOpenAi,       // OpenAI-style (completions, chat, and every other path)
  kMessages,     // Anthropic Messages (.../v1/messages)
  kCountTokens,  // Anthropic Messages' .../v1/messages/count_tokens (nothing is generated)
  kResponses,    // OpenAI Responses (.../v1/responses)
  kPooling,      // embeddings, rerank, score, classify, pooling: nothing generated, no prefix
  kTokenize,     // the engines' .../tokenize: nothing generated (tokenize_local.h)
  kDetokenize,   // .../detokenize
};

struct RequestCtx {
  Api api = Api::kOpenAi;
  bool head_method = false;  // a HEAD request: the gateway's own answers carry no body
  // Timing and identity of the request.
  std::chrono::steady_clock::time_point started_at;  // when its head arrived
  std::string request_id;  // the client's X-Request-Id when acceptable, else a new one
  std::shared_ptr<const VipConfig> cfg;  // the snapshot it was routed with (outcome points in)
  // What the body says, read as the engine reads it (dispatch.cc): read at all (a JSON object,
  // or a form's model field), the model it names (into facts.model or form_model).
  routing::RequestFacts facts;
  bool facts_parsed = false;
  bool body_read = false, body_has_model = false;
  std::string_view body_model;
  std::string form_model;
  http::NormalizedTarget norm_target;  // a non-canonical target rewritten (http/target.h)
  // Identity: the API key that admitted it; a credential-checked rule sends no bearer upstream.
  std::shared_ptr<const governance::ApiKey> key;
  bool strip_authorization = false;
  // Quota: the reservation, the response's usage, the body with include_usage added
  // (quota.inject) and a re-framed piece of the response (the relay strips the added usage).
  QuotaState quota;
  governance::UsageScanner usage;
  governance::SseUsageFilter usage_filter;
  std::string quota_body;
  std::string relay_out;
  // Routing: what this request's routing computes once (its prompt ids, kv_exact's chain),
  // endpoints ruled out, and why the last endpoint tried could not serve (a 502's message).
  routing::CycleState cycle;
  std::vector<bool> excluded;
  std::string last_error;
  // Upstream: the request head sent to the engine, where an added Host header goes (HTTP/1.0
  // clients), and the engine's response head (views into the leg's buffer).
  std::string up_head;
  size_t up_host_at = std::string::npos;
  http::ResponseHead resp_head;
  // A request with several upstream legs (a P/D pair): which leg an error answer is about
  // ("" = the only one), another leg's failure that ends this one (a concurrent prefill), and
  // the X-Request-Id the engines see when it is not the client's (the legs name their pair;
  // the access log's leg_id).
  std::string leg_note, sibling_failure, upstream_id;
  RequestOutcome outcome;
  std::string model_copy;  // outcome.model once the request's bytes were released
  // A Responses API answer's first bytes, until its id is found (response_homes.h).
  std::string response_probe;
  bool response_id_seen = false;
  // A /tokenize or /detokenize forwarded to check the gateway's own answer against the
  // engine's (tokenize_local.h): what the gateway computed, and the engine's answer so far.
  std::unique_ptr<TokenizeAnswer> tok_check;
  std::string tok_capture;
  // Scratch of an API read in another form (api_facts.h): the converted body and its facts
  // (made by the first such request: an exchange that only sees OpenAI-style requests, such as
  // most HTTP/2 streams, does not carry them).
  std::string api_body;
  std::unique_ptr<routing::RequestFacts> api_facts;
  // Its OpenTelemetry trace (serve --otlp-endpoint; request_trace.h): off unless sampled.
  RequestTrace trace;

  // Whose stored responses the request may use (response_homes.h), typed so that kinds never
  // meet: "k" and the API key's id; "j", the JWT profile, the tenant claim and the user claim,
  // each after its length; "" for traffic no credential admitted.
  std::string responseOwner() const {
    const auto& o = outcome;
    if (!o.key_id.empty()) return "k" + o.key_id;
    if (o.jwt_profile.empty()) return {};
    std::string out = "j";
    for (const std::string* part : {&o.jwt_profile, &o.tenant, &o.user})
      out.append(std::to_string(part->size())).append(":").append(*part);
    return out;
  }

  // A new request's head arrived at `now`: nothing of the previous request is left.
  void begin(std::chrono::steady_clock::time_point now) {
    api = Api::kOpenAi;
    head_method = false;
    started_at = now;
    request_id.clear();
    cfg.reset();
    facts_parsed = body_read = body_has_model = false;
    facts.clear();  // (a request whose body is not parsed reads no facts of the last one)
    body_model = {};
    key.reset();
    strip_authorization = false;
    quota.active = quota.inject = quota.sent = quota.stream = quota.shared = false;
    quota.head_request = quota.generation = false;
    quota.status = 0;
    quota.prompt_estimate = quota.reserved = 0;
    quota.held.clear();
    usage.reset();
    usage_filter.reset();
    quota_body.clear();
    last_error.clear();
    leg_note.clear();
    sibling_failure.clear();
    upstream_id.clear();
    outcome = RequestOutcome{};
    response_probe.clear();
    response_id_seen = false;
    tok_check.reset();
    std::string().swap(tok_capture);
    trace.reset();
  }
  // The request was answered and logged: the snapshot goes, big scratch is freed
  // (`keep_bytes`: capacity kept for the next request).
  void end(size_t keep_bytes) {
    cfg.reset();
    facts.shrink(keep_bytes);
    // (e.g. a request refused after its quota count: its ids; one huge prompt's chain does not
    // pin its size per connection)
    cycle.endRequest();
    if (quota_body.capacity() > keep_bytes) std::string().swap(quota_body);
    tok_check.reset();  // (a check whose answer never came whole)
    if (tok_capture.capacity() > keep_bytes) std::string().swap(tok_capture);
    if (api != Api::kOpenAi) {  // (only another API's requests use the scratch)
      if (api_body.capacity() > keep_bytes) std::string().swap(api_body);
      if (api_facts) api_facts->shrink(keep_bytes);
    }
  }
};

}  // namespace kvgate::proxy
