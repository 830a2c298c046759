// The credentials filter (credentials.h).
#include "proxy/filters/credentials.h"

#include <chrono>

#include "governance/api_keys.h"
#include "governance/jwt_auth.h"
#include "governance/services.h"

namespace kvgate::proxy {

namespace {
int64_t wallSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

bool checksCredentials(const config::RuleSpec& rule) {
  const std::string& mode = rule.api_key_auth;
  return mode == "required" || mode == "jwt" || mode == "apikey-or-jwt";
}

Verdict checkApiKey(const governance::Services& gov, const http::RequestHead& head,
                    std::string_view model, bool check_model, std::vector<std::string>* models,
                    RequestCtx& rq) {
  using governance::KeyVerdict;
  auto table = gov.keys->current();
  if (!table->loaded) {
    governance::countCheck(governance::kOutcomeStoreUnavailable);
    return Verdict::refused(503, "policy_store_unavailable", "the API key store is not available");
  }
  const std::string_view raw =
      governance::requestKey(head.get("x-api-key"), head.get("authorization"));
  const governance::KeyCheck c = governance::checkKey(*table, raw, wallSeconds());
  if (c.verdict != KeyVerdict::kOk) {
    governance::countCheck(static_cast<size_t>(c.verdict));
    return Verdict::refused(
        401, "invalid_api_key",
        c.verdict == KeyVerdict::kMissing    ? "no API key: send X-Api-Key or Authorization: Bearer"
        : c.verdict == KeyVerdict::kExpired  ? "the API key has expired"
        : c.verdict == KeyVerdict::kDisabled ? "the API key is disabled"
                                             : "the API key is not valid");
  }
  const governance::ApiKey& key = *c.key;
  if (check_model && !key.allows(model)) {
    governance::countCheck(governance::kOutcomeModelNotAllowed);
    Verdict v = Verdict::refused(
        403, "model_not_allowed",
        model.empty() ? std::string("this API key is limited to named models")
                      : "this API key may not use model '" + std::string(model) + "'");
    v.param = "model";
    return v;
  }
  if (models) {
    if (key.allowed_models.empty()) models->push_back("*");
    else *models = key.allowed_models;
    governance::countCheck(0);  // (the request path counts after the quota filter)
  } else {
    rq.key = table->by_id.at(key.key_id);  // (the quota filter reads its limits)
  }
  rq.outcome.key_id = key.key_id;
  rq.outcome.tenant = key.tenant_id;
  return {};
}

Verdict checkJwt(const governance::Services& gov, const http::RequestHead& head,
                 const std::string& profile, RequestCtx& rq) {
  using governance::JwtVerdict;
  auto table = gov.jwt->current();
  auto it = table->by_name.find(profile);
  if (!table->loaded || it == table->by_name.end()) {
    governance::countJwt(JwtVerdict::kNoProfile);
    return Verdict::refused(503, "policy_store_unavailable",
                            "JWT profile '" + profile + "' is not configured");
  }
  const std::string_view token = governance::requestKey({}, head.get("authorization"));
  governance::JwtCheck c =
      governance::verifyJwt(it->second.profile, *it->second.keyset, token, wallSeconds());
  governance::countJwt(c.verdict);
  switch (c.verdict) {
    case JwtVerdict::kOk:
      rq.outcome.tenant = std::move(c.tenant);
      rq.outcome.user = std::move(c.user);
      rq.outcome.jwt_profile = profile;
      return {};
    case JwtVerdict::kMissing:
      return Verdict::refused(401, "missing_token", "a bearer token is required");
    case JwtVerdict::kExpired:
      return Verdict::refused(401, "token_expired", "the token has expired");
    case JwtVerdict::kStale:
      return Verdict::refused(503, "policy_store_unavailable", "the JWT keyset is not current");
    default:
      return Verdict::refused(401, "invalid_token", "the token is not valid: " + c.why);
  }
}

Verdict credentialsFilter(FilterEnv& env) {
  const http::RequestHead& head = env.req.head;
  const std::string& mode = env.route.rule.api_key_auth;
  Verdict v;
  if (mode == "required" ||
      (mode == "apikey-or-jwt" &&
       governance::carriesKey(head.get("x-api-key"), head.get("authorization")))) {
    v = checkApiKey(env.gov, head, env.model, true, nullptr, env.rq);
  } else {
    v = checkJwt(env.gov, head, env.route.rule.jwt_profile, env.rq);
  }
  if (!v.ok()) return v;
  // No credential of this request reaches the engine: X-Api-Key goes by strip_api_key, any
  // bearer Authorization (a JWT beside a deciding key too) here.
  env.rq.strip_authorization = !governance::requestKey({}, head.get("authorization")).empty();
  return v;
}

}  // namespace kvgate::proxy
