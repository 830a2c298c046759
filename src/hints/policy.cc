#include "hints/policy.h"

#include <nlohmann/json.hpp>

namespace kvgate::hints {

const char* evictionName(Eviction e) { return e == Eviction::kLfu ? "lfu" : "lru"; }

Result<int64_t> parseDurationMs(std::string_view s) {
  if (s.empty() || s.size() > 32) return fail(400, "evictionTTL", "empty or too long duration");
  double total_ms = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    double v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
    if (i < s.size() && s[i] == '.') {
      double scale = 0.1;
      ++i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        v += (s[i++] - '0') * scale;
        scale /= 10;
      }
    }
    if (i == start) return fail(400, "evictionTTL", "duration needs a number before each unit");
    size_t u = i;
    while (i < s.size() && ((s[i] >= 'a' && s[i] <= 'z') || s[i] == 'u')) ++i;
    std::string_view unit = s.substr(u, i - u);
    double ms;
    if (unit == "h") ms = v * 3600e3;
    else if (unit == "m") ms = v * 60e3;
    else if (unit == "s") ms = v * 1e3;
    else if (unit == "ms") ms = v;
    else return fail(400, "evictionTTL", "unknown duration unit '" + std::string(unit) + "'");
    total_ms += ms;
  }
  if (total_ms < 1 || total_ms > 30.0 * 24 * 3600e3)
    return fail(400, "evictionTTL", "duration must be between 1ms and 720h");
  return static_cast<int64_t>(total_ms);
}

Result<double> parseFloorScore(std::string_view s) {
  // ^(0|[1-9][0-9]{0,7})(\.[0-9]{1,6})?$
  size_t i = 0;
  if (s.empty()) return fail(400, "routingFloorScore", "empty");
  if (s[0] == '0') {
    i = 1;
  } else if (s[0] >= '1' && s[0] <= '9') {
    i = 1;
    while (i < s.size() && i < 8 && s[i] >= '0' && s[i] <= '9') ++i;
  } else {
    return fail(400, "routingFloorScore", "must match ^(0|[1-9][0-9]{0,7})(\\.[0-9]{1,6})?$");
  }
  if (i < s.size()) {
    if (s[i] != '.')
      return fail(400, "routingFloorScore", "must match ^(0|[1-9][0-9]{0,7})(\\.[0-9]{1,6})?$");
    size_t f = ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i != s.size() || i - f < 1 || i - f > 6)
      return fail(400, "routingFloorScore", "must match ^(0|[1-9][0-9]{0,7})(\\.[0-9]{1,6})?$");
  }
  return std::stod(std::string(s));
}

namespace {

using nlohmann::json;

Result<bool> getBool(const json& o, const char* key, bool dflt) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return fail(400, key, std::string(key) + " must be true or false");
  return it->get<bool>();
}

Result<int64_t> getInt(const json& o, const char* key, int64_t dflt, int64_t lo, int64_t hi) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return dflt;
  if (!it->is_number_integer())
    return fail(400, key, std::string(key) + " must be an integer");
  int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)
                  ? INT64_MAX
                  : it->get<int64_t>();
  if (v < lo || v > hi)
    return fail(400, key, std::string(key) + " must be between " + std::to_string(lo) + " and " +
                              std::to_string(hi));
  return v;
}

Result<void> onlyKnown(const json& o, std::initializer_list<const char*> keys, const char* where) {
  for (auto it = o.begin(); it != o.end(); ++it) {
    bool ok = false;
    for (const char* k : keys) ok = ok || it.key() == k;
    if (!ok) return fail(400, it.key(), std::string("unknown field '") + it.key() + "' in " + where);
  }
  return {};
}

}  // namespace

Result<CachePolicy> parsePolicy(std::string_view text) {
  if (text.size() > 64 * 1024) return fail(400, "policy", "policy file larger than 64 KiB");
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    return fail(400, "policy", "policy file is not a JSON object");
  const json* spec = &doc;
  if (doc.contains("spec")) {
    if (!doc["spec"].is_object()) return fail(400, "spec", "spec must be an object");
    spec = &doc["spec"];
  }
  const json& o = *spec;
  if (auto ok = onlyKnown(o,
                          {"eviction", "evictionTTL", "minimumPrefixTokens",
                           "minimumMatchedTokens", "routingFloorScore", "lookupTimeoutMs",
                           "strategy", "affinityRouting", "maxEntries", "blockSize"},
                          "the policy");
      !ok)
    return tl::unexpected(ok.error());
  CachePolicy p;
  if (auto it = o.find("eviction"); it != o.end() && !it->is_null()) {
    if (*it == "LRU") p.eviction = Eviction::kLru;
    else if (*it == "LFU") p.eviction = Eviction::kLfu;
    else return fail(400, "eviction", "eviction must be \"LRU\" or \"LFU\"");
  }
  if (auto it = o.find("evictionTTL"); it != o.end() && !it->is_null()) {
    if (it->is_number_integer()) {  // a Go duration on the wire: nanoseconds (0 = default)
      int64_t ns = it->get<int64_t>();
      if (ns < 0 || ns > int64_t(720) * 3600 * 1'000'000'000)
        return fail(400, "evictionTTL", "evictionTTL must be between 0 and 720h");
      if (ns >= 1'000'000) p.eviction_ttl_ms = ns / 1'000'000;
    } else if (it->is_string()) {
      auto d = parseDurationMs(it->get<std::string>());
      if (!d) return tl::unexpected(d.error());
      p.eviction_ttl_ms = *d;
    } else {
      return fail(400, "evictionTTL", "evictionTTL must be a duration (\"30m\" or nanoseconds)");
    }
  }
  auto mpt = getInt(o, "minimumPrefixTokens", 0, 0, 1 << 24);
  if (!mpt) return tl::unexpected(mpt.error());
  p.minimum_prefix_tokens = static_cast<int32_t>(*mpt);
  auto mmt = getInt(o, "minimumMatchedTokens", 64, 0, 1 << 24);
  if (!mmt) return tl::unexpected(mmt.error());
  p.minimum_matched_tokens = static_cast<int32_t>(*mmt);
  if (auto it = o.find("routingFloorScore"); it != o.end() && !it->is_null()) {
    if (!it->is_string()) return fail(400, "routingFloorScore", "routingFloorScore is a string");
    auto f = parseFloorScore(it->get<std::string>());
    if (!f) return tl::unexpected(f.error());
    p.routing_floor_score = *f;
  }
  auto lt = getInt(o, "lookupTimeoutMs", 0, 0, 60'000);
  if (!lt) return tl::unexpected(lt.error());
  p.lookup_timeout_ms = *lt;
  if (auto it = o.find("strategy"); it != o.end() && !it->is_null()) {
    if (!it->is_object()) return fail(400, "strategy", "strategy must be an object");
    if (auto ok = onlyKnown(*it, {"enableChainMatching", "requireChain", "enableTenantHot"},
                            "strategy");
        !ok)
      return tl::unexpected(ok.error());
    auto a = getBool(*it, "enableChainMatching", true);
    auto b = getBool(*it, "requireChain", false);
    auto c = getBool(*it, "enableTenantHot", true);
    if (!a) return tl::unexpected(a.error());
    if (!b) return tl::unexpected(b.error());
    if (!c) return tl::unexpected(c.error());
    p.enable_chain_matching = *a;
    p.require_chain = *b;
    p.enable_tenant_hot = *c;
    if (p.require_chain && !p.enable_chain_matching)
      return fail(400, "requireChain", "requireChain needs enableChainMatching");
  }
  if (auto it = o.find("affinityRouting"); it != o.end() && !it->is_null()) {
    if (*it == "Enabled") p.affinity_routing = true;
    else if (*it == "Disabled") p.affinity_routing = false;
    else return fail(400, "affinityRouting", "affinityRouting must be \"Enabled\" or \"Disabled\"");
  }
  auto me = getInt(o, "maxEntries", 8'000'000, 1, int64_t(1) << 32);
  if (!me) return tl::unexpected(me.error());
  p.max_entries = static_cast<uint64_t>(*me);
  auto bs = getInt(o, "blockSize", 16, 1, 4096);
  if (!bs) return tl::unexpected(bs.error());
  p.block_size = static_cast<uint32_t>(*bs);
  return p;
}

}  // namespace kvgate::hints
