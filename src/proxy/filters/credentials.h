// The credentials filter (api_key_auth "required", "jwt", "apikey-or-jwt"; governance.md):
// "required" checks the API key (X-Api-Key, or Authorization: Bearer) against the current key
// table, then the model against the key's allowed models; "jwt" verifies the bearer token against
// the rule's JWT profile; "apikey-or-jwt": a present key decides alone, else the bearer token is
// a JWT. Admitted: who (key id, tenant, user) goes into the request's outcome, the key into
// rq.key (the quota filter reads its limits), and no bearer Authorization reaches the engine.
// Refusals: 401 (missing, invalid, expired, disabled), 403 model_not_allowed, 503 when the key
// store or the JWT profile is not available. No knobs beyond the rule's fields.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "proxy/filters/request_filter.h"

namespace kvgate::proxy {

// Does the rule check credentials (its api_key_auth is one of the three modes)?
bool checksCredentials(const config::RuleSpec& rule);

// The key check: the verdict and, when `models` is given (the /v1/models list), the key's
// allowed models ("*": any), else the key kept in rq.key. `check_model`: the model must be one
// the key allows. Nothing here suspends: the table snapshot is released before the caller writes.
Verdict checkApiKey(const governance::Services& gov, const http::RequestHead& head,
                    std::string_view model, bool check_model, std::vector<std::string>* models,
                    RequestCtx& rq);
// The bearer token against the JWT profile and its keyset (governance/jwt_auth.h).
Verdict checkJwt(const governance::Services& gov, const http::RequestHead& head,
                 const std::string& profile, RequestCtx& rq);

// The filter: the rule's mode applied to the request.
Verdict credentialsFilter(FilterEnv& env);

}  // namespace kvgate::proxy
