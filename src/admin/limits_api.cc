// Rate and token limits (upstream-gateway.md §1.6; governance/limits.h for the semantics):
//   POST   /netlox/v1/config/ai/tenant/ratelimit {tenant_id*, rps, tokens_per_min, burst_pct,
//          model_limits:[{model, tokens_per_min}]} -> 204 (replaces the row; omitted
//          model_limits keep the stored ones)
//   GET    /netlox/v1/config/ai/tenant/ratelimit          -> 200 [row...] (by tenant_id)
//   GET    /netlox/v1/config/ai/tenant/ratelimit/{tenant} -> 200 row | 404
//   DELETE /netlox/v1/config/ai/tenant/ratelimit/{tenant} -> 204 | 404
//   POST   /netlox/v1/config/ai/user/ratelimit {tenant_id*, user_id*, rps, burst_size,
//          tokens_per_min, model_limits} -> 204 (replaces the row, model_limits included)
//   GET    /netlox/v1/config/ai/user/ratelimit/{tenant}   -> 200 [row...] (empty when none)
//   GET    /netlox/v1/config/ai/user/ratelimit/{tenant}/{user} -> 200 row | 404
//   DELETE /netlox/v1/config/ai/user/ratelimit/{tenant}/{user} -> 204 | 404
//   POST   /netlox/v1/config/ai/ratelimit/defaults {scope* global|rule, rule_ident (rule: the
//          rule's vip:port or name), default_user_rps/tpm, default_tenant_rps/tpm,
//          vip_shared_rps/tpm} -> 204 (replaces the row; at least one limit must be non-zero)
//   GET    /netlox/v1/config/ai/ratelimit/defaults        -> 200 {"global": row|null, "rules": [..]}
//   GET    /netlox/v1/config/ai/ratelimit/defaults/{global|rule}[?rule_ident=] -> 200 | 404
//   DELETE /netlox/v1/config/ai/ratelimit/defaults/{global|rule}[?rule_ident=] -> 204 | 404
// rule_ident is ignored for scope global. Path segments are percent-decoded. A bad body is a 400
// naming the field and changes nothing; without a store (--state-dir unwritable) every call is
// 503 policy_store_unavailable. Errors: {"code","message","result": field or resource}.
#include <nlohmann/json.hpp>

#include "admin/api.h"
#include "common/json_depth.h"
#include "common/log.h"
#include "governance/limit_store.h"

namespace kvgate::admin {

namespace {
using json = nlohmann::json;

int hexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "/a/b%20c/" -> {"a", "b c"}; nullopt on a malformed escape.
std::optional<std::vector<std::string>> segments(std::string_view rest) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == '/') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
      continue;
    }
    if (rest[i] == '%') {
      if (i + 2 >= rest.size()) return std::nullopt;
      const int h = hexVal(rest[i + 1]), l = hexVal(rest[i + 2]);
      if (h < 0 || l < 0) return std::nullopt;
      cur += static_cast<char>(h * 16 + l);
      i += 2;
      continue;
    }
    cur += rest[i];
  }
  return out;
}

}  // namespace

asio::awaitable<void> sendFieldError(const http::Request& req, http::ResponseWriter& w,
                                     int status, const std::string& field,
                                     const std::string& detail) {
  log::info("api", req.method + " " + req.path + " -> " + std::to_string(status) + ": " + detail);
  json j = {{"code", status}, {"message", detail}, {"result", field}};
  co_await w.send(status, "application/json",
                  j.dump(-1, ' ', false, json::error_handler_t::replace));
}

Result<nlohmann::json> parseApiJson(const std::string& body) {
  if (body.size() > 64 * 1024) return fail(413, "body", "request body too large");
  if (!jsonDepthWithin(body)) return fail(400, "body", "JSON body nested too deeply");
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return fail(400, "body", "malformed JSON body");
  return j;
}

asio::awaitable<void> Api::limits(http::Request& req, http::ResponseWriter& w) {
  auto err = [&](int status, const std::string& field, const std::string& detail) {
    return sendFieldError(req, w, status, field, detail);
  };
  if (!limits_) {
    co_await err(503, "policy_store_unavailable", "the governance store is not available");
    co_return;
  }
  constexpr std::string_view kAi = "/netlox/v1/config/ai/";
  auto segs = segments(std::string_view(req.path).substr(kAi.size()));
  if (!segs) {
    co_await err(400, "path", "malformed percent-escape in the path");
    co_return;
  }
  if (segs->size() < 2) {
    co_await err(404, "path", "no such API path: " + req.path);
    co_return;
  }
  auto& s = *segs;
  // (segment 0-1: "tenant"/"user" + "ratelimit", or "ratelimit" + "defaults")
  const std::string what = s[0] == "ratelimit" ? "defaults" : s[0];
  if ((what == "defaults" && s[1] != "defaults") ||
      (what != "defaults" && (s[1] != "ratelimit" || (what != "tenant" && what != "user")))) {
    co_await err(404, "path", "no such API path: " + req.path);
    co_return;
  }
  std::vector<std::string> ids(s.begin() + 2, s.end());
  json body;
  if (req.method == "POST") {
    if (!ids.empty()) {
      co_await err(405, "method", "POST to the collection, not to a row");
      co_return;
    }
    auto j = parseApiJson(req.body);
    if (!j) {
      co_await err(j.error().code, j.error().source, j.error().what);
      co_return;
    }
    body = std::move(*j);
  } else if (req.method != "GET" && req.method != "DELETE") {
    co_await err(405, "method", "use POST, GET or DELETE");
    co_return;
  }
  auto done = [&](const Result<void>& r, const std::string& note) -> asio::awaitable<void> {
    if (!r) {
      co_await err(r.error().code, r.error().source, r.error().what);
      co_return;
    }
    log::info("api", note);
    co_await w.send(204, "application/json", "");
  };

  if (what == "tenant") {
    if (req.method == "POST") {
      const governance::TenantLimit* old = nullptr;
      if (body.is_object() && body.contains("tenant_id") && body["tenant_id"].is_string())
        old = limits_->tenant(body["tenant_id"].get<std::string>());
      auto t = governance::parseTenantLimit(body, old);
      if (!t) {
        co_await err(t.error().code, t.error().source, t.error().what);
        co_return;
      }
      co_await done(limits_->putTenant(*t), "tenant limits set for " + t->tenant_id);
      co_return;
    }
    if (ids.empty() && req.method == "GET") {
      json out = json::array();
      for (const auto& t : limits_->tenants()) out.push_back(governance::toJson(t));
      co_await w.send(200, "application/json", out.dump());
      co_return;
    }
    if (ids.size() != 1) {
      co_await err(404, "path", "use /tenant/ratelimit/{tenant_id}");
      co_return;
    }
    if (req.method == "DELETE") {
      co_await done(limits_->removeTenant(ids[0]), "tenant limits removed for " + ids[0]);
      co_return;
    }
    const auto* t = limits_->tenant(ids[0]);
    if (!t) {
      co_await err(404, "tenant rate-limit row", "no tenant rate-limit row for '" + ids[0] + "'");
      co_return;
    }
    co_await w.send(200, "application/json", governance::toJson(*t).dump());
    co_return;
  }

  if (what == "user") {
    if (req.method == "POST") {
      auto u = governance::parseUserLimit(body);
      if (!u) {
        co_await err(u.error().code, u.error().source, u.error().what);
        co_return;
      }
      co_await done(limits_->putUser(*u),
                    "user limits set for " + u->tenant_id + "/" + u->user_id);
      co_return;
    }
    if (ids.size() == 1 && req.method == "GET") {
      json out = json::array();
      for (const auto& u : limits_->users(ids[0])) out.push_back(governance::toJson(u));
      co_await w.send(200, "application/json", out.dump());
      co_return;
    }
    if (ids.size() != 2) {
      co_await err(404, "path", "use /user/ratelimit/{tenant_id}[/{user_id}]");
      co_return;
    }
    if (req.method == "DELETE") {
      co_await done(limits_->removeUser(ids[0], ids[1]),
                    "user limits removed for " + ids[0] + "/" + ids[1]);
      co_return;
    }
    const auto* u = limits_->user(ids[0], ids[1]);
    if (!u) {
      co_await err(404, "user rate-limit row",
                   "no user rate-limit row for '" + ids[0] + "/" + ids[1] + "'");
      co_return;
    }
    co_await w.send(200, "application/json", governance::toJson(*u).dump());
    co_return;
  }

  if (what == "defaults") {
    if (req.method == "POST") {
      auto d = governance::parseDefaults(body);
      if (!d) {
        co_await err(d.error().code, d.error().source, d.error().what);
        co_return;
      }
      co_await done(limits_->putDefaults(*d), "rate-limit defaults set for " + d->scope + " " +
                                                  d->rule_ident);
      co_return;
    }
    if (ids.empty() && req.method == "GET") {
      const auto* g = limits_->defaults("global", "");
      json rules = json::array();
      for (const auto& d : limits_->ruleDefaults()) rules.push_back(governance::toJson(d));
      json out = {{"global", g ? governance::toJson(*g) : json(nullptr)}, {"rules", rules}};
      co_await w.send(200, "application/json", out.dump());
      co_return;
    }
    if (ids.size() != 1 || (ids[0] != "global" && ids[0] != "rule")) {
      co_await err(404, "path", "use /ratelimit/defaults/{global|rule}[?rule_ident=]");
      co_return;
    }
    const std::string& scope = ids[0];
    const std::string ident = scope == "rule" ? req.queryParam("rule_ident").value_or("") : "";
    if (scope == "rule" && ident.empty()) {
      co_await err(400, "rule_ident", "scope rule needs ?rule_ident=");
      co_return;
    }
    if (req.method == "DELETE") {
      co_await done(limits_->removeDefaults(scope, ident),
                    "rate-limit defaults removed for " + scope + " " + ident);
      co_return;
    }
    const auto* d = limits_->defaults(scope, ident);
    if (!d) {
      // (a named local: GCC 12 double-destroys a conditional's temporary inside co_await)
      std::string what_row = "no rate-limit defaults row for " + scope;
      if (!ident.empty()) what_row += " " + ident;
      co_await err(404, "rate-limit defaults row", what_row);
      co_return;
    }
    co_await w.send(200, "application/json", governance::toJson(*d).dump());
    co_return;
  }
  co_await err(404, "path", "no such API path: " + req.path);
}

}  // namespace kvgate::admin
