// Dispatch of one request: request id, request facts (one parse of the body, only for the facts
// someone needs), the model pool lookup, and the answers the gateway gives itself
// (GET /v1/models, 400 invalid_json, 404 no_route, 503 model_unavailable, 501 not_active,
// 503 service_down) before handing the request to forward().
#include <chrono>

#include "common/ids.h"
#include "common/json_depth.h"
#include "common/log.h"
#include "governance/api_keys.h"
#include "governance/jwt_auth.h"
#include "governance/limits.h"
#include "http/server.h"
#include "proxy/api_facts.h"
#include "proxy/exchange.h"
#include "proxy/facts_parser.h"
#include "proxy/filters/credentials.h"
#include "proxy/filters/quota.h"
#include "proxy/form_model.h"
#include "telemetry/tracer.h"
#include "tokenizer/request_tokenizer.h"

namespace kvgate::proxy {

asio::awaitable<bool> Exchange::answerModels(const VipConfig& cfg, std::string_view host,
                                             std::string_view path,
                                             const std::vector<std::string>* allowed) {
  auto names = cfg.models(host, path);
  if (allowed && !(allowed->size() == 1 && (*allowed)[0] == "*"))
    std::erase_if(names, [&](const std::string& n) {
      return std::find(allowed->begin(), allowed->end(), n) == allowed->end();
    });
  std::string b = "{\"object\":\"list\",\"data\":[";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) b += ",";
    b += "{\"id\":\"" + http::jsonEscape(names[i]) +
         "\",\"object\":\"model\",\"created\":0,\"owned_by\":\"kvgate\"}";
  }
  b += "]}";
  HeadFields& h = ownHead(200);
  h.add("content-type", "application/json");
  h.add("x-request-id", rq_.request_id);
  h.add("content-length", std::to_string(b.size()));
  rq_.outcome.status = 200;
  countResponse(200);
  co_return co_await writeAnswer(b);
}

asio::awaitable<bool> Exchange::answerUnroutable(const Route* route, bool host_path_matched,
                                                 std::string_view model) {
  if (!route) {
    if (host_path_matched)
      co_await sendError(503, "model_unavailable",
                         "model '" + std::string(model) + "' is not served here", "model");
    else
      co_await sendError(404, "no_route", "no service for this host and path");
  } else if (!route->rule.inactive_capability.empty()) {
    co_await sendError(501, "not_active",
                       "capability '" + route->rule.inactive_capability +
                           "' is configured on this service but not active in this build",
                       route->rule.inactive_capability);
  } else {
    co_await sendError(503, "service_down", "service is administratively down");
  }
  co_return true;
}

asio::awaitable<int> Exchange::tokenizeLocally(const Request& req, const Route& route) {
  const size_t api = rq_.api == Api::kDetokenize;
  auto& events = route.stats->tokenize_events[api];
  auto forwarded = [&] {
    events[3].fetch_add(1, std::memory_order_relaxed);
    return 0;
  };
  TokenizeMirror* mirror = route.tokenize_mirror.get();
  // Only the paths the engine serves (rules do not rewrite paths: this is the engine's), and
  // only bodies it takes: vLLM lower-cases the Content-Type and compares what is before any ';'
  // with application/json, spaces included.
  const std::string_view path = req.head.target.substr(0, req.head.target.find('?'));
  std::string_view ct = req.head.get("content-type");
  ct = ct.substr(0, ct.find(';'));
  if (!w_.tokenizers || !mirror || req.head.method != "POST" ||
      !tokenizePathServed(route.tokenize, path) || !http::iequals(ct, "application/json") ||
      req.body.size() > kMaxTokenizeBody || !jsonDepthWithin(req.body))
    co_return forwarded();
  const auto body = nlohmann::ordered_json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("model") || !body["model"].is_string())
    co_return forwarded();
  const std::string& model = body["model"].get_ref<const std::string&>();
  // (the model the gates checked, when they read one, is this one; SGLang ignores the member
  // and serves its one model: answered only where the rule's pool names it)
  if ((rq_.body_read && (!rq_.body_has_model || rq_.body_model != model)) ||
      (route.tokenize == TokenizeDialect::kSglang && route.rule.model_name != model))
    co_return forwarded();
  // The credentials the engine would see are part of the form's key: an engine that checks
  // keys (SGLang's --api-key) answers each caller's first calls itself.
  std::string auth;
  if (!rq_.strip_authorization) auth.append(req.head.get("authorization"));
  auth += '\n';
  if (!route.rule.strip_api_key) auth.append(req.head.get("x-api-key"));
  const char* why = "";
  const auto read = readTokenizeRequest(
      route.tokenize, api ? TokenizeOp::kDetokenize : TokenizeOp::kTokenize, body, auth, &why);
  if (!read || mirror->blocked(read->key)) co_return forwarded();
  const auto tok = w_.tokenizers->find(model);  // (null while loading: forwarded meanwhile)
  if (!tok) co_return forwarded();
  auto answer = computeTokenizeAnswer(*read, body, *tok, w_.tokenizers->textBound(), &why);
  if (!answer) co_return forwarded();
  std::string out;
  switch (mirror->decide(*answer, route.tokenize_verify_every, &out)) {
    case TokenizeMirror::Use::kForward:
      co_return forwarded();
    case TokenizeMirror::Use::kCheck:
      rq_.tok_check = std::make_unique<TokenizeAnswer>(std::move(*answer));
      co_return 0;
    case TokenizeMirror::Use::kAnswer:
      break;
  }
  events[0].fetch_add(1, std::memory_order_relaxed);
  HeadFields& h = ownHead(200);
  h.add("content-type", "application/json");
  h.add("x-request-id", rq_.request_id);
  h.add("content-length", std::to_string(out.size()));
  addRuleHeaders(h);
  rq_.outcome.status = 200;
  countResponse(200);
  const bool ok = co_await writeAnswer(out);
  co_return ok ? 1 : 2;
}

// The model a key and a quota are checked against: the body's when it was read (a JSON object,
// or a form's model field), none when the body named none or could not be read (the engine
// reads the model from that body, and an X-Model header would name a model the gateway never
// saw); X-Model only for a request without a body.
std::string_view Exchange::bodyModelOr(const Request& req, std::string_view header_model) const {
  if (rq_.body_read) return rq_.body_has_model ? rq_.body_model : std::string_view();
  if (!req.body.empty()) return {};
  return header_model;
}

// A body the engine parses as JSON: Content-Type absent or application/json (or any +json type).
bool Exchange::jsonBody(std::string_view ct) {
  ct = ct.substr(0, ct.find(';'));
  while (!ct.empty() && (ct.back() == ' ' || ct.back() == '\t')) ct.remove_suffix(1);
  if (ct.empty()) return true;
  return http::iequals(ct, "application/json") ||
         (ct.size() > 5 && http::iequals(ct.substr(ct.size() - 5), "+json"));
}

void Exchange::refuse(Refusal r) {
  rq_.outcome.denied = true;
  w_.stats.refused[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed);
}

// Returns false when the connection must close (the client is gone or the exchange broke).
// The request's id: the client's X-Request-Id when acceptable (common/ids.h), else a new one.
void Exchange::takeRequestId(const http::RequestHead& head) {
  const std::string_view given = head.get("x-request-id");
  if (isAcceptableRequestId(given)) {
    rq_.request_id.assign(given);
    return;
  }
  char rid[32];
  newRequestId(rid);
  rq_.request_id.assign(rid, sizeof rid);
}

asio::awaitable<bool> Exchange::dispatch(Request& req) {
  const auto& head = req.head;
  takeRequestId(head);
  if (w_.opts.tracer) rq_.trace.start(head, w_.opts.tracer->sampleRatio(), rq_.started_at);

  rq_.cfg = l_->config.load();  // kept until the request is logged (rq_.outcome points into it)
  const auto& cfg = rq_.cfg;
  // The path as the engine reads it (http/target.h): a non-canonical target is rewritten, the
  // rules match its decoded path and the rewritten target is what is forwarded; one that cannot
  // be rewritten safely is refused.
  std::string_view path = head.target.substr(0, head.target.find('?'));
  if (!http::isCanonicalTarget(head.target)) {
    if (std::string why = http::normalizeTarget(head.target, rq_.norm_target); !why.empty()) {
      refuse(Refusal::kBadPath);
      co_await sendError(400, "bad_path", why);
      co_return !client_gone_;
    }
    req.head.target = rq_.norm_target.forward;
    rq_.trace.rename(head.method, req.head.target);
    path = rq_.norm_target.match;
    rq_.api = apiOf(path);  // (read from the raw target at its head: now from the engine's path)
  }
  w_.stats.api_requests[static_cast<size_t>(rq_.api)].fetch_add(1, std::memory_order_relaxed);
  // The host without its port and one trailing dot ("api.example.com." names the same host);
  // rules compare it case-insensitively.
  std::string_view host = hostWithoutPort(head.host);
  if (host.size() > 1 && host.back() == '.') host.remove_suffix(1);
  std::string_view model = head.get("x-model");
  bool host_path_matched = false;
  const Route* route = nullptr;
  // One parse of the body, for the facts someone needs. When the model must come from the body,
  // the route is not known yet: parse for the union of the listener's routes' needs.
  const bool model_from_body = model.empty() && cfg->has_model_pools;
  uint32_t needs = 0;
  if (model_from_body) {
    needs = routing::kNeedModel | cfg->body_needs;
  } else {
    route = cfg->find(host, path, model, host_path_matched);
    if (route) needs = route->needs & routing::kBodyNeeds;
  }
  const uint32_t own_needs = needs;
  // Where a quota may apply (credentials are checked, or shared-VIP defaults exist), the same
  // parse gives the quota stage its estimate: prompt size, max_tokens, stream (filters/quota.cc).
  // (keyless traffic on a listener without credential checks pays only shared-VIP buckets)
  const bool metered = cfg->checks_credentials || w_.gov.limits->current()->hasVipDefaults();
  if (metered) {
    needs |= routing::kNeedModel | routing::kNeedPromptPrefix | routing::kNeedRequestShape;
    if (w_.prompt_tokens) needs |= w_.prompt_tokens->needs();  // (the reservation's count)
  }
  // Where the model decides something (a pool, a key's allowed models, a quota), the body is
  // read for it whatever the route needs, and the gateway never acts on a model it could not
  // read exactly as the engine will (governance.md, "Reading requests as the engine does"): a
  // key's allowed models are checked against the body's model, and an X-Model that names another
  // is refused, so a header cannot carry a request past a check or to a rule without one.
  // (`metered` covers every credential-checked listener.)
  const bool model_matters = cfg->has_model_pools || metered;
  if (model_matters) needs |= routing::kNeedModel;
  // A Responses request continuing a stored one is pinned to its endpoint (forward.cc).
  if (rq_.api == Api::kResponses) needs |= routing::kNeedResponseLink;
  if (needs && !req.body.empty()) {
    const std::string_view ct = head.get("content-type");
    const bool json = jsonBody(ct);
    // (a Messages or Responses body's prompt facts come from its chat form: not walked here)
    const bool converted_api = rq_.api == Api::kMessages || rq_.api == Api::kResponses;
    auto st = parseFacts(req.body.data(), req.body.size(), req.body_capacity,
                         converted_api ? needs & ~kPromptNeeds : needs, w_.opts.prefix_key_bytes,
                         rq_.facts, w_.opts.chat_max_bytes);
    if (st == FactsStatus::kInvalidJson && json && (own_needs != 0 || cfg->checks_credentials)) {
      refuse(Refusal::kBodyUnreadable);
      co_await sendError(400, "invalid_json", "request body is not valid JSON");
      co_return !client_gone_;
    }
    if (model_matters && json && st == FactsStatus::kTooLarge) {
      refuse(Refusal::kBodyUnreadable);
      co_await sendError(413, "request_too_large",
                         "the body is larger than the gateway reads for its model (" +
                             std::to_string(kMaxParseBytes >> 20) + " MiB)");
      co_return !client_gone_;
    }
    if (model_matters && st == FactsStatus::kOk && rq_.facts.model_ambiguous) {
      refuse(Refusal::kAmbiguousModel);
      co_await sendError(400, "ambiguous_model",
                         "the body's model cannot be read unambiguously (\"model\" given more "
                         "than once, not decodable, or a member the gateway cannot read)",
                         "model");
      co_return !client_gone_;
    }
    // The reader follows the Content-Type, as the engine's does: a form is read as a form even
    // when its bytes also parse as JSON (and its JSON facts are then not the request's).
    const FormModel form =
        model_matters ? formModel(ct, req.body, rq_.form_model) : FormModel::kNotForm;
    rq_.facts_parsed = st == FactsStatus::kOk && form == FormModel::kNotForm;
    if (rq_.facts_parsed) {
      rq_.body_read = true;
      rq_.body_has_model = rq_.facts.has_model;
      if (rq_.body_has_model) rq_.body_model = rq_.facts.model;
      // The Messages and Responses APIs: the prompt as the engine renders it, from its chat form.
      if (rq_.api == Api::kMessages || rq_.api == Api::kCountTokens)
        messagesShape(rq_.api, rq_.facts);
      else if (rq_.api == Api::kResponses)
        responsesShape(rq_.facts);
      else if (rq_.api == Api::kPooling || rq_.api == Api::kTokenize || rq_.api == Api::kDetokenize)
        poolingShape(rq_.facts);  // (nothing generated: the reservation is the input alone)
      if (converted_api && (needs & kPromptNeeds)) {
        const Conversion c =
            apiPromptFacts(req.body, needs, w_.opts.prefix_key_bytes, w_.opts.chat_max_bytes, rq_);
        w_.stats.api_prompt[rq_.api == Api::kResponses][static_cast<size_t>(c)].fetch_add(
            1, std::memory_order_relaxed);
      }
    } else {
      // A form (the audio endpoints' multipart): its model field, as the engine reads it.
      switch (form) {
        case FormModel::kOne:
          rq_.body_read = rq_.body_has_model = true;
          rq_.body_model = rq_.form_model;
          break;
        case FormModel::kNone:
          rq_.body_read = true;
          break;
        case FormModel::kAmbiguous:
          refuse(Refusal::kAmbiguousModel);
          co_await sendError(400, "ambiguous_model",
                             "the form's model field cannot be read unambiguously (given more "
                             "than once, a part the gateway cannot read, or a malformed form)",
                             "model");
          co_return !client_gone_;
        case FormModel::kNotForm:
          break;
      }
    }
    if (model_from_body && rq_.body_has_model) model = rq_.body_model;
    // X-Model on a credential-checked listener: the body must name that model too. A body that
    // names none makes the engine serve its default model, which the header did not name.
    if (cfg->checks_credentials && !model_from_body && !model.empty() && rq_.body_read &&
        (!rq_.body_has_model || rq_.body_model != model)) {
      refuse(Refusal::kModelMismatch);
      co_await sendError(400, "model_mismatch",
                         rq_.body_has_model ? "X-Model and the body's model differ"
                                            : "X-Model names a model the body does not (the "
                                              "engine would serve its default model)",
                         "model");
      co_return !client_gone_;
    }
  }
  // (the access log and loxilb_ai_requests_total: the pool's model, else the body's when parsed)
  rq_.outcome.model = !model.empty() || !rq_.body_has_model ? model : rq_.body_model;
  if (head.method == "GET" && (path == "/v1/models" || path == "/models") &&
      !cfg->models(host, path).empty()) {
    // On a listener with credential-checked rules the list needs a valid credential: a key
    // (then only the models it may use) or a token valid for one of the rules' JWT profiles.
    std::vector<std::string> allowed;
    if (cfg->checks_credentials) {
      Verdict a;
      if (cfg->takes_keys &&
          (governance::carriesKey(head.get("x-api-key"), head.get("authorization")) ||
           cfg->jwt_profiles.empty())) {
        a = checkApiKey(w_.gov, head, {}, false, &allowed, rq_);
      } else {
        a = Verdict::refused(401, "missing_token", "a bearer token is required");
        for (const auto& p : cfg->jwt_profiles) {
          a = checkJwt(w_.gov, head, p, rq_);
          if (a.ok()) break;
        }
        allowed = {"*"};
      }
      if (!a.ok()) {
        rq_.outcome.denied = true;
        co_await sendError(a.status, a.code, a.message, a.param);
        co_return !client_gone_;
      }
    }
    co_return co_await answerModels(*cfg, host, path, cfg->checks_credentials ? &allowed : nullptr);
  }
  if (model_from_body) route = cfg->find(host, path, model, host_path_matched);
  rq_.outcome.route = route;
  if (!route || !route->rule.inactive_capability.empty() || !route->rule.admin_up)
    co_return co_await answerUnroutable(route, host_path_matched, model) && !client_gone_;
  // The rule's request filters (filters/request_filter.h): credentials, quota. A reservation
  // the quota filter makes is settled when this request ends, on every path.
  struct Settle {
    Exchange& c;
    ~Settle() { settleQuota(c.rq_, c.w_.gov, c.client_gone_, c.nowNs()); }
  } settle{*this};
  // (a sampled request's gates span covers the filters that ran: request_trace.h)
  const auto gates_t0 =
      rq_.trace.on ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  {
    FilterEnv env{req,      rq_,    *route,  bodyModelOr(req, model),
                  metered,  w_.gov, w_.opts, w_.prompt_tokens,
                  w_.stats, nowNs()};
    for (const RequestFilter& f : route->filters) {
      Verdict v;
      bool ran = true;
      if (f.check) {
        v = f.check(env);
      } else if (f.applies(env)) {  // (no co_await in a condition: GCC 12)
        v = co_await f.check_async(env);
      } else {
        ran = false;
      }
      if (ran && rq_.trace.on) rq_.trace.gateRan(f.name, gates_t0);
      if (!v.ok()) {
        rq_.outcome.denied = true;
        if (rq_.trace.on) rq_.trace.gates_end = std::chrono::steady_clock::now();
        co_await sendError(v.status, v.code, v.message, v.param, false, v.retry_after_s);
        co_return !client_gone_;
      }
    }
  }
  if (rq_.trace.on && rq_.trace.gates_start != std::chrono::steady_clock::time_point{})
    rq_.trace.gates_end = std::chrono::steady_clock::now();
  if (route->rule.inactive_timeout_sec > 0)
    client_->setIdleTimeout(std::chrono::seconds(route->rule.inactive_timeout_sec));
  bool ok;  // (no co_await in a conditional: GCC 12)
  const bool tokenize_api = rq_.api == Api::kTokenize || rq_.api == Api::kDetokenize;
  if (tokenize_api && !route->pd_dialect && route->tokenize != TokenizeDialect::kOff) {
    const int local = co_await tokenizeLocally(req, *route);
    if (local) co_return local == 1 && !client_gone_;
  }
  // A pooling request (embeddings, rerank, ...) has no prefix to follow, nor has a tokenize
  // call: the rule's least-loaded pipeline places it (kvPoolingLb; null: the rule's own).
  const routing::Pipeline* pipeline =
      rq_.api == Api::kPooling || tokenize_api ? route->pooling_pipeline.get() : nullptr;
  if (route->pd_dialect)
    ok = co_await forwardPd(req, *route);
  else
    ok = co_await forward(req, *route, pipeline);
  if (!ok) client_->closeAfter();
  co_return ok;
}

}  // namespace kvgate::proxy
