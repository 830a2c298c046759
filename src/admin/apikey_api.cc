// /netlox/v1/config/ai/apikey: API keys as upstream-gateway.md §1.6 lists them.
//   POST   {tenant_id*, name, allowed_models[], rate_limit_rps, burst_size, tokens_per_min,
//           expires_at, enabled} -> 201 {"key_id","raw_key"} (the raw key appears here only)
//   GET    [?tenant_id=T]        -> 200 [summary...] (by creation time)
//   GET    /{key_id}             -> 200 summary | 404
//   DELETE /{key_id}             -> 204 | 404
//   PATCH  /{key_id} {any of the POST fields} -> 204 | 404 (an extension route upstream too)
// A summary is the record without salt or hash, plus created_at. expires_at: unix seconds
// (0 or absent: never) or an RFC 3339 UTC time ("2027-01-31T00:00:00Z"); summaries give unix
// seconds. Validation: tenant_id 1-256 bytes; name at most 256; allowed_models at most 1024
// strings of 1-256 bytes (empty: every model); rate_limit_rps, burst_size, tokens_per_min
// non-negative; enabled a boolean; no other field. A bad body is a 400 naming the field and
// changes nothing. Without a key store (serve --state-dir unwritable) every call is 503
// policy_store_unavailable.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>

#include "admin/api.h"
#include "common/json_depth.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "governance/key_store.h"

namespace kvgate::admin {

namespace {
using json = nlohmann::json;


// RFC 3339 UTC, strictly "YYYY-MM-DDTHH:MM:SS[.fraction]Z" (fraction ignored) -> unix seconds
// after 1970-01-01T00:00:00Z (0 means "never", so the epoch itself is refused).
std::optional<int64_t> parseTime(const std::string& s) {
  auto digits = [&](size_t at, size_t n) -> int {
    int v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (i >= s.size() || s[i] < '0' || s[i] > '9') return -1;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s.size() < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
      s[13] != ':' || s[16] != ':')
    return std::nullopt;
  const int y = digits(0, 4), mo = digits(5, 2), d = digits(8, 2), h = digits(11, 2),
            mi = digits(14, 2), sec = digits(17, 2);
  size_t z = 19;
  if (z < s.size() && s[z] == '.') {
    ++z;
    const size_t f = z;
    while (z < s.size() && s[z] >= '0' && s[z] <= '9') ++z;
    if (z == f || z - f > 9) return std::nullopt;
  }
  if (z + 1 != s.size() || (s[z] != 'Z' && s[z] != 'z')) return std::nullopt;
  if (y < 1970 || mo < 1 || mo > 12 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 59)
    return std::nullopt;
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (d < 1 || d > kDays[mo - 1] + (mo == 2 && leap ? 1 : 0)) return std::nullopt;
  std::tm tm{};
  tm.tm_year = y - 1900, tm.tm_mon = mo - 1, tm.tm_mday = d, tm.tm_hour = h, tm.tm_min = mi,
  tm.tm_sec = sec;
  const int64_t t = static_cast<int64_t>(timegm(&tm));
  if (t <= 0) return std::nullopt;
  return t;
}

// Applies the body's fields to `k` (all optional here; POST checks tenant_id itself).
Result<void> applyFields(const json& j, governance::ApiKey& k) {
  if (!j.is_object()) return fail(400, "body", "body must be a JSON object");

  auto nonneg = [&](const json& v, const char* f) -> Result<double> {
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 1e15)
      return fail(400, f, std::string(f) + " must be a non-negative number");
    return v.get<double>();
  };
  for (auto& [key, v] : j.items()) {
    if (key == "tenant_id") {
      auto s = jsonString(v, "tenant_id", 1, 256);
      if (!s) return tl::unexpected(s.error());
      k.tenant_id = *s;
    } else if (key == "name") {
      auto s = jsonString(v, "name", 0, 256);
      if (!s) return tl::unexpected(s.error());
      k.name = *s;
    } else if (key == "allowed_models") {
      if (!v.is_array() || v.size() > 1024)
        return fail(400, "allowed_models", "allowed_models must be an array of at most 1024 names");
      std::vector<std::string> models;
      for (auto& m : v) {
        auto s = jsonString(m, "allowed_models", 1, 256);
        if (!s) return tl::unexpected(s.error());
        models.push_back(*s);
      }
      k.allowed_models = std::move(models);
    } else if (key == "rate_limit_rps") {
      auto n = nonneg(v, "rate_limit_rps");
      if (!n) return tl::unexpected(n.error());
      if (*n > 0 && *n < 1e-6)
        return fail(400, "rate_limit_rps", "rate_limit_rps must be 0 (unlimited) or at least 1e-6");
      k.rate_limit_rps = *n;
    } else if (key == "burst_size" || key == "tokens_per_min") {
      auto n = nonneg(v, key.c_str());
      if (!n) return tl::unexpected(n.error());
      if (!v.is_number_integer() && !v.is_number_unsigned())
        return fail(400, key, key + " must be an integer");
      (key == "burst_size" ? k.burst_size : k.tokens_per_min) = static_cast<int64_t>(*n);
    } else if (key == "expires_at") {
      if (v.is_null()) {
        k.expires_at = 0;
      } else if (v.is_number_integer() || v.is_number_unsigned()) {
        if (v.get<double>() < 0 || v.get<double>() > 253402300799.0)
          return fail(400, "expires_at", "expires_at must be unix seconds or an RFC 3339 time");
        k.expires_at = v.get<int64_t>();
      } else if (v.is_string()) {
        auto t = parseTime(v.get<std::string>());
        if (!t) return fail(400, "expires_at", "expires_at must be unix seconds or an RFC 3339 time");
        k.expires_at = *t;
      } else {
        return fail(400, "expires_at", "expires_at must be unix seconds or an RFC 3339 time");
      }
    } else if (key == "enabled") {
      if (!v.is_boolean()) return fail(400, "enabled", "enabled must be a boolean");
      k.enabled = v.get<bool>();
    } else {
      return fail(400, key, key + ": unknown field");
    }
  }
  return {};
}

}  // namespace

asio::awaitable<void> Api::apiKeys(http::Request& req, http::ResponseWriter& w) {
  auto err = [&](int status, const std::string& field, const std::string& detail) {
    return sendFieldError(req, w, status, field, detail);
  };
  if (!keys_) {
    co_await err(503, "policy_store_unavailable", "the API key store is not available");
    co_return;
  }
  constexpr std::string_view kKeys = "/netlox/v1/config/ai/apikey";
  std::string_view rest = std::string_view(req.path).substr(kKeys.size());
  while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const std::string id(rest);
  if (id.find('/') != std::string::npos) {
    co_await err(404, "key_id", "no such API path: " + req.path);
    co_return;
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  json body;
  if (req.method == "POST" || req.method == "PATCH") {
    auto j = parseApiJson(req.body);
    if (!j) {
      co_await err(j.error().code, j.error().source, j.error().what);
      co_return;
    }
    body = std::move(*j);
  }
  if (id.empty()) {
    if (req.method == "GET") {
      json out = json::array();
      for (const auto& k : keys_->list(req.queryParam("tenant_id").value_or("")))
        out.push_back(governance::keySummary(k));
      co_await w.send(200, "application/json", out.dump());
      co_return;
    }
    if (req.method != "POST") {
      co_await err(405, "method", "use POST to create a key, GET to list them");
      co_return;
    }
    governance::ApiKey k;
    auto applied = applyFields(body, k);
    if (!applied) {
      co_await err(applied.error().code, applied.error().source, applied.error().what);
      co_return;
    }
    if (k.tenant_id.empty()) {
      co_await err(400, "tenant_id", "tenant_id is required");
      co_return;
    }
    k.created_at = now;
    const std::string raw = governance::mintKey(k);
    auto r = keys_->insert(k);
    if (!r) {
      co_await err(r.error().code, r.error().source, r.error().what);
      co_return;
    }
    log::info("api", "API key " + k.key_id + " created for tenant " + k.tenant_id);
    json out = {{"key_id", k.key_id}, {"raw_key", raw}};
    co_await w.send(201, "application/json", out.dump());
    co_return;
  }
  const governance::ApiKey* found = keys_->find(id);
  if (!found) {
    co_await err(404, "key_id", "no API key " + id);
    co_return;
  }
  if (req.method == "GET") {
    co_await w.send(200, "application/json", governance::keySummary(*found).dump());
    co_return;
  }
  if (req.method == "DELETE") {
    auto r = keys_->remove(id);
    if (!r) {
      co_await err(r.error().code, r.error().source, r.error().what);
      co_return;
    }
    log::info("api", "API key " + id + " deleted");
    co_await w.send(204, "application/json", "");
    co_return;
  }
  if (req.method == "PATCH") {
    governance::ApiKey k = *found;
    auto applied = applyFields(body, k);
    if (!applied) {
      co_await err(applied.error().code, applied.error().source, applied.error().what);
      co_return;
    }
    auto r = keys_->update(k);
    if (!r) {
      co_await err(r.error().code, r.error().source, r.error().what);
      co_return;
    }
    co_await w.send(204, "application/json", "");
    co_return;
  }
  co_await err(405, "method", "use GET, PATCH or DELETE on a key");
}

}  // namespace kvgate::admin
