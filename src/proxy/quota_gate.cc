// The quota stage of the request path (issue 14 §2; governance/quota.h for the ledger's law):
// after the credential check and before routing, the request's buckets (governance/limits.h
// planBuckets: key, user, tenant and shared-VIP RPS, then key, user, user+model, tenant,
// tenant+model and shared-VIP TPM) must admit it; a refusal is a 429 with Retry-After. The TPM
// reservation is the prompt estimate plus max_tokens (or serve --quota-max-tokens when the body
// names none). The prompt estimate: a token-id prompt's id count, else the rendered prompt's bytes
// / 4, rounded up (the request facts' one parse; no tokenizer runs on the event loop for it).
//
// Settlement (settleQuota, run when dispatch ends on every path, client disconnects included):
// the reservation goes back and each TPM bucket is charged the engine's usage (the relay's
// UsageScanner), else an estimate, counted as missing usage: nothing when no engine got the
// request or it answered an error without usage; the prompt estimate when the exchange broke
// before an answer; the prompt estimate plus the stream's data events for a stream; the whole
// reservation for another answer. A stream whose client did not ask for usage gets
// stream_options.include_usage added to the body it sends (single-leg rules whose JSON body has no
// stream_options), and the relay strips the usage chunk and the "usage":null members it adds.
#include <chrono>

#include "governance/api_keys.h"
#include "proxy/client_conn.h"

namespace kvgate::proxy {

namespace {

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ClientConn::KeyAdmission ClientConn::admitQuota(const Route& route, std::string_view model,
                                                std::string_view body) {
  auto limits = governance::limitRegistry().current();
  if (!key_ && limits->empty()) return {};  // nothing limits this gateway's traffic
  const governance::Principal who{key_.get(), outcome_.tenant, outcome_.user};
  const auto specs =
      governance::planBuckets(*limits, who, model, route.rule.listenKey(), route.rule.name);
  if (specs.empty()) return {};
  int64_t prompt = 0, max_tokens = w_.opts.quota_max_tokens;
  if (facts_parsed_) {
    prompt = facts_.prompt_id_count > 0
                 ? static_cast<int64_t>(facts_.prompt_id_count)
                 : static_cast<int64_t>((facts_.prompt_render_total + 3) / 4);
    if (facts_.max_tokens && *facts_.max_tokens >= 0) max_tokens = *facts_.max_tokens;
  }
  const int64_t reserve = prompt + max_tokens;
  auto v = governance::quotaLedger().admit(specs, reserve, steadyNs());
  if (!v.ok) {
    governance::quotaMetrics().hit(outcome_.tenant, v.reason);
    if (v.reason == governance::LimitReason::kKeyRps)
      governance::countCheck(governance::kOutcomeRateLimited);
    const bool tpm = governance::isTpm(v.reason);
    KeyAdmission a = KeyAdmission::refused(
        429, tpm ? "token_quota_exceeded" : "rate_limit_exceeded",
        std::string(tpm ? "token quota" : "request rate") + " exceeded (" +
            governance::reasonName(v.reason) + "); retry after " +
            std::to_string(v.retry_after_s) + " s");
    a.retry_after_s = v.retry_after_s;
    return a;
  }
  quota_.held = std::move(v.held);
  quota_.active = !quota_.held.empty();
  quota_.prompt_estimate = prompt;
  quota_.reserved = reserve;
  if (!quota_.active) return {};
  // Ask a stream for its usage when the client did not (the relay hides it again).
  if (!route.pd_dialect && facts_parsed_ && facts_.stream.value_or(false) &&
      !facts_.has_stream_options) {
    const size_t brace = body.find('{');
    if (brace != std::string_view::npos) {
      std::string_view rest = body.substr(brace + 1);
      size_t i = 0;
      while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t' || rest[i] == '\r' ||
                                 rest[i] == '\n'))
        ++i;
      quota_body_.assign(body.substr(0, brace + 1));
      quota_body_ += "\"stream_options\":{\"include_usage\":true}";
      if (i < rest.size() && rest[i] != '}') quota_body_ += ',';
      quota_body_.append(rest);
      quota_.inject = true;
    }
  }
  return {};
}

void ClientConn::settleQuota() {
  if (!quota_.active) return;
  quota_.active = false;
  int64_t used = 0;
  bool measured = false, missing = false;
  if (const auto& u = usage_.usage(); u && u->charge() >= 0) {
    used = u->charge();
    measured = true;
  } else if (!quota_.sent) {
    used = 0;  // no engine got the request
  } else if (quota_.status == 0) {
    used = quota_.prompt_estimate;  // sent, then broken or abandoned before an answer
    missing = true;
  } else if (quota_.status >= 400) {
    used = 0;  // the engine refused it
  } else {
    used = quota_.stream ? quota_.prompt_estimate + int64_t(usage_.dataEvents()) : quota_.reserved;
    missing = true;
  }
  governance::quotaLedger().settle(quota_.held, used, steadyNs());
  governance::quotaMetrics().settled(outcome_.tenant, measured ? used : 0, measured ? 0 : used,
                                     missing);
  outcome_.quota_tokens = used;
}

void ClientConn::resetQuota() {
  quota_.active = quota_.inject = quota_.sent = quota_.stream = false;
  quota_.status = 0;
  quota_.held.clear();
  usage_.reset();
  usage_filter_.reset();
  if (quota_body_.capacity() > kKeepBufferBytes) std::string().swap(quota_body_);
  quota_body_.clear();
  key_.reset();
}

}  // namespace kvgate::proxy
