// The quota filter of the request path (request_filter.h) (issue 14 §2; governance/quota.h for the
// ledger's law): after the credential check and before routing, the request's buckets
// (governance/limits.h planBuckets: key, user, tenant and shared-VIP RPS, then key, user,
// user+model, tenant, tenant+model and shared-VIP TPM) must admit it; a refusal is a 429 with
// Retry-After. The buckets live in this process (governance/quota.h) or, with serve --redis, in
// Redis shared by the replicas (governance/redis_counters.h; its I/O thread answers, this coroutine
// waits without blocking the worker).
//
// Reservation: (prompt estimate + max_tokens) x n, each term clamped to 1e9; a request that
// generates nothing (body-less, count_tokens, tokenize, a retrieve or cancel of a stored
// response) reserves its prompt estimate only. max_tokens is the
// larger of max_tokens, max_completion_tokens and max_output_tokens, else serve --quota-max-tokens
// (digit strings count, as pydantic reads them; a count the gateway cannot read makes max_tokens
// at least --quota-max-tokens and n 1024). The prompt
// estimate: a token-id prompt's id count, else the model's tokenizer (serve --models-dir; loaded
// off the event loop, bounded text; the ids stay in the request's CycleState for Tier 1.5), else
// the rendered prompt's bytes / 4 rounded up (the request facts' one parse), else, when the facts
// found no prompt, the body's bytes / 4.
//
// Settlement (settleQuota, run when the request ends on every path, client disconnects included):
// the reservation goes back and each TPM bucket is charged nothing for a request that generates
// nothing (body-less, count_tokens, tokenize, a retrieve or cancel of a stored response, which
// replays a stored usage), else the engine's usage (the
// relay's UsageScanner; P/D answers too), else an estimate, counted as missing usage: nothing when
// no engine got the request, it answered an error, or the request was HEAD; the whole reservation
// when the client left a non-streamed request before its answer (the engine may have produced
// all of it: cancelling just before completion must not cost only the prompt); the prompt
// estimate when the exchange broke on the engine's side before an answer, or a stream's client
// left before its head; the prompt estimate plus the stream's data events for a stream; the
// whole reservation for another answer. A stream whose client did
// not ask for usage (no stream_options, or include_usage false) gets stream_options with
// include_usage true appended as the body's last member (the client's other stream_options
// members kept; the last duplicate wins in the engines' JSON parsers), and the relay strips the
// usage chunk and the "usage":null members it adds (single-leg rules). Not on the Responses API
// (a target ending in /responses): its streams carry their usage in response.completed; nor on
// the Messages API, whose streams carry it in message_delta (vLLM: input_tokens and
// output_tokens; Anthropic's shape: output_tokens, with message_start's input_tokens;
// governance/usage.h). A Messages count_tokens request
// generates nothing and is charged nothing.
#include "proxy/filters/quota.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "engines/openai_responses.h"
#include "governance/api_keys.h"
#include "governance/limits.h"
#include "governance/quota.h"
#include "governance/redis_counters.h"
#include "governance/services.h"
#include "routing/prompt_tokens.h"

namespace kvgate::proxy {

namespace {
// POST /v1/responses (the OpenAI Responses API; any prefix, a query string ignored).
bool isResponsesApi(std::string_view target) {
  target = target.substr(0, target.find('?'));
  return target.ends_with("/responses");
}

// Waits for the shared counters' answer on the caller's executor (the worker's event loop).
template <class Token>
auto asyncSharedAdmit(governance::RedisCounters& rc, std::vector<governance::BucketSpec> specs,
                      int64_t tokens, Token&& token) {
  using Verdict = governance::RedisCounters::Verdict;
  return asio::async_initiate<Token, void(Verdict)>(
      [&rc](auto handler, std::vector<governance::BucketSpec> specs, int64_t tokens) {
        auto ex = asio::get_associated_executor(handler);
        auto h = std::make_shared<decltype(handler)>(std::move(handler));
        rc.admit(std::move(specs), tokens, [h, ex](Verdict v) {
          asio::post(ex, [h, v = std::move(v)]() mutable { (*h)(std::move(v)); });
        });
      },
      token, std::move(specs), tokens);
}

constexpr int64_t kMaxTerm = 1'000'000'000;

// The prompt's token count for the reservation (0: the facts hold no prompt).
int64_t promptCount(FilterEnv& env) {
  if (env.rq.facts.prompt_id_count > 0) {
    env.stats.quota_prompt_ids.fetch_add(1, std::memory_order_relaxed);
    return static_cast<int64_t>(env.rq.facts.prompt_id_count);
  }
  const int64_t bytes = static_cast<int64_t>(env.rq.facts.prompt_render_total);
  if (const routing::PromptTokens* tok = env.prompt_tokens) {
    // Into the request's cache: Tier 1.5 reuses the ids instead of rendering and tokenizing the
    // same facts again.
    std::vector<uint32_t>& ids = env.rq.cycle.tokens;
    if (!env.rq.cycle.tokens_ready) {
      env.rq.cycle.tokens_ok =
          tok->tokens(env.rq.facts, ids, &env.rq.cycle.tokens_cut) == routing::TokensStatus::kOk;
      env.rq.cycle.tokens_ready = true;
    }
    if (env.rq.cycle.tokens_ok && !ids.empty()) {
      env.stats.quota_prompt_tokenizer.fetch_add(1, std::memory_order_relaxed);
      // (what the tokenizer's bound cut, estimated by it)
      const int64_t beyond =
          static_cast<int64_t>(std::min<size_t>(env.rq.cycle.tokens_cut, INT64_MAX / 2));
      return static_cast<int64_t>(ids.size()) + beyond;
    }
  }
  if (bytes == 0) return 0;
  env.stats.quota_prompt_bytes.fetch_add(1, std::memory_order_relaxed);
  return (bytes + 3) / 4;
}

}  // namespace

bool quotaApplies(const FilterEnv& env) { return env.metered; }

asio::awaitable<Verdict> quotaFilter(FilterEnv& env) {
  const Route& route = env.route;
  const Request& req = env.req;
  const std::string_view model = env.model;
  RequestCtx& rq = env.rq;
  using governance::LimitReason;
  auto limits = env.gov.limits->current();
  const bool credentialed = rq.key || !rq.outcome.tenant.empty() || !rq.outcome.user.empty();
  if (!limits->loaded && credentialed) {
    // Limits unknown (the governance store did not open): fail closed, like the keys.
    if (rq.key) governance::countCheck(governance::kOutcomeStoreUnavailable);
    co_return Verdict::refused(503, "policy_store_unavailable",
                                    "the limit store is not available");
  }
  if (!rq.key && limits->empty()) co_return Verdict{};  // nothing limits this traffic
  const governance::Principal who{rq.key.get(), rq.outcome.tenant, rq.outcome.user};
  auto specs =
      governance::planBuckets(*limits, who, model, route.rule.listenKey(), route.rule.name);
  if (specs.empty()) {
    if (rq.key) governance::countCheck(0);
    co_return Verdict{};
  }
  int64_t prompt = rq.facts_parsed ? promptCount(env) : 0, max_tokens = env.opts.quota_max_tokens,
          n = 1;
  if (rq.facts_parsed) {
    if (rq.facts.max_tokens) max_tokens = *rq.facts.max_tokens;
    if (rq.facts.n && *rq.facts.n > 1) n = std::min<int64_t>(*rq.facts.n, 1024);
    // A count the gateway could not read as the engine does: at least the default bound, and
    // as many choices as it ever counts.
    if (rq.facts.counts_unreadable) {
      max_tokens = std::max(max_tokens, env.opts.quota_max_tokens);
      n = 1024;
    }
  }
  // A body whose prompt the facts did not find (another endpoint's shape, or a walk cut short by
  // a string simdjson refuses): the body's own size stands in for it.
  if (prompt == 0) {
    prompt = static_cast<int64_t>((req.body.size() + 3) / 4);
    env.stats.quota_prompt_bytes.fetch_add(1, std::memory_order_relaxed);
  }
  // (a body-less request generates nothing, nor does a Messages count_tokens, nor a retrieve or
  // cancel of a stored Responses API response, body or not): only its prompt is reserved
  rq.quota.generation =
      !req.body.empty() && rq.api != Api::kCountTokens && rq.api != Api::kTokenize &&
      rq.api != Api::kDetokenize &&
      !(rq.api == Api::kOpenAi &&
        !engines::responses::storedResponseRequestId(req.head.method, req.head.target).empty());
  if (!rq.quota.generation) max_tokens = 0;
  prompt = std::min(prompt, kMaxTerm);
  max_tokens = std::clamp<int64_t>(max_tokens, 0, kMaxTerm);
  const int64_t reserve = std::min<int64_t>((prompt + max_tokens) * n, kMaxTerm);

  governance::QuotaLedger::Verdict v;
  rq.quota.shared = false;
  if (governance::RedisCounters* rc = env.gov.shared) {
    auto sv = co_await asyncSharedAdmit(*rc, std::move(specs), reserve, asio::use_awaitable);
    using S = governance::RedisCounters::State;
    if (sv.state == S::kWarming) {
      Verdict a = Verdict::refused(
          429, "token_quota_warming", "the shared quota state is not reachable yet; retry");
      a.retry_after_s = 1;
      if (rq.key) governance::countCheck(0);
      co_return a;
    }
    if (sv.state == S::kClosed) {  // (counted by the counters: script_closed)
      Verdict a = Verdict::refused(
          503, "quota_store_error",
          "the shared quota store keeps failing its script; requests are refused until it "
          "recovers");
      a.retry_after_s = 1;
      if (rq.key) governance::countCheck(0);
      co_return a;
    }
    if (sv.state == S::kOpen) {  // (counted by the counters: cold_open)
      if (rq.key) governance::countCheck(0);
      co_return Verdict{};
    }
    v.ok = sv.state == S::kOk;
    v.reason = sv.reason;
    v.retry_after_s = sv.retry_after_s;
    v.held = std::move(sv.held);
    rq.quota.shared = true;
  } else {
    v = env.gov.ledger->admit(specs, reserve, env.now_ns);
  }
  if (rq.key)
    governance::countCheck(!v.ok && v.reason == LimitReason::kKeyRps
                               ? governance::kOutcomeRateLimited
                               : size_t{0});
  if (!v.ok) {
    env.gov.quota_metrics->hit(rq.outcome.tenant, v.reason);
    const bool tpm = governance::isTpm(v.reason);
    Verdict a = Verdict::refused(
        429, tpm ? "token_quota_exceeded" : "rate_limit_exceeded",
        std::string(tpm ? "token quota" : "request rate") + " exceeded (" +
            governance::reasonName(v.reason) + "); retry after " +
            std::to_string(v.retry_after_s) + " s");
    a.retry_after_s = v.retry_after_s;
    co_return a;
  }
  rq.quota.held = std::move(v.held);
  rq.quota.active = !rq.quota.held.empty();
  rq.quota.prompt_estimate = prompt;
  rq.quota.reserved = reserve;
  rq.quota.head_request = req.head.method == "HEAD";
  if (!rq.quota.active) co_return Verdict{};
  // Ask a stream for its usage when the client did not (the relay hides it again). Not on the
  // Responses API: its streams always end with response.completed, which carries the usage,
  // and it has no include_usage (its response.created events carry "usage":null, which the
  // relay's filter would strip).
  if (!route.pd_dialect && rq.facts_parsed && rq.facts.stream.value_or(false) &&
      !rq.facts.include_usage && rq.api == Api::kOpenAi && !isResponsesApi(req.head.target)) {
    nlohmann::json so = nlohmann::json::object();
    if (rq.facts.has_stream_options) {
      so = nlohmann::json::parse(rq.facts.stream_options_json, nullptr, false);
      if (!so.is_object()) co_return Verdict{};  // (unreadable: settled by estimate)
    }
    so["include_usage"] = true;
    const std::string_view body = req.body;
    size_t end = body.size();
    while (end > 0 && (body[end - 1] == ' ' || body[end - 1] == '\t' || body[end - 1] == '\r' ||
                       body[end - 1] == '\n'))
      --end;
    if (end == 0 || body[end - 1] != '}') co_return Verdict{};
    size_t before = end - 1;  // the last member, or the opening brace of an empty object
    while (before > 0 && (body[before - 1] == ' ' || body[before - 1] == '\t' ||
                          body[before - 1] == '\r' || body[before - 1] == '\n'))
      --before;
    rq.quota_body.assign(body.substr(0, end - 1));
    if (before > 0 && body[before - 1] != '{') rq.quota_body += ',';
    rq.quota_body += "\"stream_options\":";
    rq.quota_body += so.dump();
    rq.quota_body += '}';
    rq.quota.inject = true;
  }
  co_return Verdict{};
}

void settleQuota(RequestCtx& rq, const governance::Services& gov, bool client_gone,
                 int64_t now_ns) {
  if (!rq.quota.active) return;
  rq.quota.active = false;
  int64_t used = 0;
  bool measured = false, missing = false;
  if (!rq.quota.generation) {
    used = 0;  // a body-less request (GET /v1/responses/{id} replays a stored answer's usage)
  } else if (const auto& u = rq.usage.usage(); u && u->charge() >= 0) {
    used = u->charge();
    measured = true;
  } else if (!rq.quota.sent || rq.quota.head_request) {
    used = 0;  // no engine got the request, or it was a HEAD
  } else if (rq.quota.status == 0) {
    // Sent, no answer yet. The client left: the engine may have generated everything up to the
    // moment the abort reached it (a non-streamed answer comes whole at the end), so the whole
    // reservation. The exchange broke on the engine's side: the prompt estimate.
    // (rq.quota.stream is known once a head came: before that, the request asked for a stream)
    const bool stream = rq.quota.stream || (rq.facts_parsed && rq.facts.stream.value_or(false));
    used = client_gone && !stream ? rq.quota.reserved : rq.quota.prompt_estimate;
    missing = true;
  } else if (rq.quota.status >= 400) {
    used = 0;  // the engine refused it
  } else {
    used = rq.quota.stream ? rq.quota.prompt_estimate + int64_t(rq.usage.dataEvents())
                            : rq.quota.reserved;
    missing = true;
  }
  used = std::clamp<int64_t>(used, 0, kMaxTerm);
  if (rq.quota.shared) {
    if (governance::RedisCounters* rc = gov.shared) rc->settle(std::move(rq.quota.held), used);
  } else {
    gov.ledger->settle(rq.quota.held, used, now_ns);
  }
  gov.quota_metrics->settled(rq.outcome.tenant, measured ? used : 0, measured ? 0 : used,
                                missing);
  rq.outcome.quota_tokens = used;
  rq.quota.held.clear();
}

}  // namespace kvgate::proxy
