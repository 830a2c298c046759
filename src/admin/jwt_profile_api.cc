// /netlox/v1/config/ai/jwtauthprofile: JWT auth profiles (governance/jwt_auth.h), an upstream
// route whose fields upstream does not document; ours:
//   POST   {name*, jwks_file*, issuer, audience (string or array), algorithms (RS256, ES256),
//           tenant_claim ("tenant"), user_claim ("sub"), clock_skew_sec (60, 0..600),
//           missing_claims ("reject" | "allow": a token without the tenant or user claim)}
//          -> 200 (created or replaced); 400 naming the field, or when the JWKS file does not
//          load (nothing changes)
//   GET    -> 200 [profile + {keys, loaded_at, error}...]
//   GET    /{name} -> 200 | 404;  DELETE /{name} -> 200 | 404 | 409 while a rule names it
#include <nlohmann/json.hpp>

#include "admin/api.h"
#include "common/json_depth.h"
#include "common/log.h"
#include "governance/profile_store.h"

namespace kvgate::admin {

namespace {
using json = nlohmann::json;

json describe(const governance::JwtProfile& p, const governance::JwtKeyset* ks) {
  json j = json::parse(governance::profileJson(p));
  j["keys"] = ks ? ks->keys.size() : 0;
  j["loaded_at"] = ks ? ks->loaded_at_s : 0;
  j["error"] = ks ? ks->error : std::string();
  return j;
}
}  // namespace

asio::awaitable<void> Api::jwtProfiles(http::Request& req, http::ResponseWriter& w) {
  auto err = [&](int status, const std::string& detail) -> asio::awaitable<void> {
    log::info("api", req.method + " " + req.path + " -> " + std::to_string(status) + ": " + detail);
    co_await w.send(status, "application/json", apiErrorBody(status, detail));
  };
  if (!profiles_) {
    co_await err(503, "policy_store_unavailable: the governance store is not available");
    co_return;
  }
  constexpr std::string_view kBaseJwt = "/netlox/v1/config/ai/jwtauthprofile";
  std::string_view rest = std::string_view(req.path).substr(kBaseJwt.size());
  while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const std::string name(rest);
  if (name.find('/') != std::string::npos) {
    co_await err(404, "no such API path: " + req.path);
    co_return;
  }
  if (name.empty()) {
    if (req.method == "GET") {
      json out = json::array();
      for (const auto& p : profiles_->list()) {
        auto ks = profiles_->keyset(p.name);
        out.push_back(describe(p, ks.get()));
      }
      co_await w.send(200, "application/json", out.dump());
      co_return;
    }
    if (req.method != "POST") {
      co_await err(405, "use POST to create a profile, GET to list them");
      co_return;
    }
    if (req.body.size() > 64 * 1024) {
      co_await err(413, "request body too large");
      co_return;
    }
    if (!jsonDepthWithin(req.body)) {
      co_await err(400, "JSON body nested too deeply");
      co_return;
    }
    auto p = governance::parseProfile(req.body);
    if (!p) {
      co_await err(p.error().code, p.error().what);
      co_return;
    }
    auto r = profiles_->put(*p);
    if (!r) {
      co_await err(r.error().code, r.error().what);
      co_return;
    }
    log::info("api", "JWT profile " + p->name + " stored");
    co_await w.send(200, "application/json", R"({"result":"Success"})");
    co_return;
  }
  auto p = profiles_->find(name);
  if (!p) {
    co_await err(404, "no JWT profile " + name);
    co_return;
  }
  if (req.method == "GET") {
    auto ks = profiles_->keyset(name);
    co_await w.send(200, "application/json", describe(*p, ks.get()).dump());
    co_return;
  }
  if (req.method == "DELETE") {
    for (const auto& rule : store_.rules())
      if (rule.jwt_profile == name) {
        co_await err(409, "JWT profile " + name + " is used by rule " + rule.key());
        co_return;
      }
    auto r = profiles_->remove(name);
    if (!r) {
      co_await err(r.error().code, r.error().what);
      co_return;
    }
    co_await w.send(200, "application/json", R"({"result":"Success"})");
    co_return;
  }
  co_await err(405, "use GET or DELETE on a profile");
}

}  // namespace kvgate::admin
