#include "config/rule.h"

#include <algorithm>
#include <set>

#include "common/net.h"
#include "config/fields.h"
#include "config/scoring_profile.h"
#include "config/stage_catalog.h"
#include "config/tls_fields.h"
#include "http/target.h"

namespace kvgate::config {
namespace {
using nlohmann::json;

tl::unexpected<Error> bad(const std::string& field, const std::string& what) {
  return fail(400, field, "invalid " + field + ": " + what);
}

Result<void> checkField(const FieldSpec& f, const std::string& path, const json& v) {
  switch (f.type) {
    case FieldType::kBool:
      if (!v.is_boolean()) return bad(path, "must be a boolean");
      break;
    case FieldType::kInt: {
      if (!v.is_number_integer()) return bad(path, "must be an integer");
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return bad(path, "out of range");
      int64_t x = v.get<int64_t>();
      if (x < f.min || x > f.max)
        return bad(path, "out of range (" + std::to_string(f.min) + ".." + std::to_string(f.max) +
                             "), got " + std::to_string(x));
      break;
    }
    case FieldType::kString:
      if (!v.is_string()) return bad(path, "must be a string");
      if (static_cast<int64_t>(v.get_ref<const std::string&>().size()) > f.max)
        return bad(path, "longer than " + std::to_string(f.max) + " bytes");
      break;
    case FieldType::kEnum: {
      if (!v.is_string()) return bad(path, "must be a string");
      const auto& s = v.get_ref<const std::string&>();
      bool ok = false;
      std::string allowed;
      for (auto e : f.values) {
        if (s == e) ok = true;
        if (!e.empty()) allowed += (allowed.empty() ? "" : "|") + std::string(e);
      }
      if (!ok) return bad(path, "must be one of " + allowed);
      break;
    }
    case FieldType::kIp:
      if (!v.is_string() || !net::isIpLiteral(v.get_ref<const std::string&>()))
        return bad(path, "must be an IPv4 or IPv6 address");
      break;
    case FieldType::kObject:
      if (!v.is_object()) return bad(path, "must be an object");
      if (v.dump().size() > 64 * 1024) return bad(path, "too large");
      break;
    case FieldType::kStringArray:
      if (!v.is_array() || v.size() > 64)
        return bad(path, "must be an array of at most 64 strings");
      for (auto& e : v)
        if (!e.is_string() || e.get_ref<const std::string&>().size() > 256)
          return bad(path, "must be an array of strings");
      break;
    case FieldType::kStringMap:
      if (!v.is_object() || v.size() > 256) return bad(path, "must be an object of strings");
      for (auto& [k, e] : v.items())
        if (!e.is_string() || k.size() > 256 || e.get_ref<const std::string&>().size() > 4096)
          return bad(path, "must be an object of strings");
      break;
    case FieldType::kArray:
      if (!v.is_array()) return bad(path, "must be an array");
      break;
    case FieldType::kJson:
      if (v.dump().size() > 64 * 1024) return bad(path, "too large");
      break;
  }
  return {};
}

template <typename T>
T getOr(const json& o, const char* k, T def) {
  auto it = o.find(k);
  if (it == o.end() || it->is_null()) return def;
  return it->get<T>();
}

bool validHost(const std::string& h) {
  for (unsigned char c : h)
    if (!(std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == ':' || c == '[' || c == ']' ||
          c == '*'))
      return false;
  return true;
}

// Go-style omitempty for GET: zero values are dropped.
bool isZero(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
         (v.is_number_integer() && v.get<int64_t>() == 0) || (v.is_string() && v.empty()) ||
         ((v.is_object() || v.is_array()) && v.empty());
}

// A P/D rule's `pdLadder` (its prefill pick's stages, in order): stages standing for a ladder
// tier (config/stage_catalog.h), each at most once, Tier 0 first when listed, Tier 2 (the stage
// that always picks) last; Tier 1.5 exactly when kvExactMode is 1 (its subscriptions serve nothing
// else), Tier 1 whenever pd_cache_aware_mode asks for it; a stage's knobs only with the stage.
// One reading: a ladder and the flags never disagree.
Result<void> checkPdLadder(const json& stored, bool pd, int kv_mode) {
  auto it = stored.find("pdLadder");
  if (it == stored.end() || it->is_null()) return {};
  const std::string f = "serviceArguments.pdLadder";
  if (!pd) return bad(f, "requires pd_disagg_mode");
  using T = LadderTier;
  const std::string t0(stageOfTier(T::kTier0).name), t1(stageOfTier(T::kTier1).name),
      t15(stageOfTier(T::kTier15).name), t2(stageOfTier(T::kTier2).name);
  std::set<LadderTier> seen;
  LadderTier last = T::kNone;
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string& n = (*it)[i].get_ref<const std::string&>();
    const StageFacts* st = stageFacts(n);
    if (!st || st->tier == T::kNone)
      return bad(f, "'" + n + "' is not a P/D ladder stage (" + t0 + ", " + t1 + ", " + t15 +
                        ", " + t2 + ")");
    if (!seen.insert(st->tier).second) return bad(f, "'" + n + "' is listed twice");
    if (st->tier == T::kTier0 && i != 0)
      return bad(f, n + " (Tier 0) must come first: it decides which endpoints a new "
                        "conversation may start on");
    last = st->tier;
  }
  if (last != T::kTier2)
    return bad(f, "must end with " + t2 + " (Tier 2, the stage that always picks)");
  if (seen.count(T::kTier15) && kv_mode != 1) return bad(f, t15 + " requires kvExactMode 1");
  if (!seen.count(T::kTier15) && kv_mode == 1)
    return bad(f, "kvExactMode 1 asks for " + t15 + ": list it, or drop kvExactMode");
  if (!seen.count(T::kTier1) && getOr<bool>(stored, "pd_cache_aware_mode", false))
    return bad(f, "pd_cache_aware_mode asks for " + t1 + ": list it, or drop the flag");
  // A knob of a stage the ladder leaves out would do nothing: refused, not ignored.
  for (const auto& st : kStageCatalog)
    if (st.tier != T::kNone && !seen.count(st.tier))
      for (std::string_view knob : st.knobs)
        if (stored.contains(knob))
          return bad(f, std::string(knob) + " tunes " + std::string(st.name) +
                            ", which the ladder leaves out");
  return {};
}

}  // namespace

const char* selectorName(int sel) {
  for (const auto& s : kStageCatalog)
    if (s.sel >= 0 && s.sel == sel) return s.name.data();  // (the catalog's names are literals)
  // The seed's numbers without a selector here keep the names the upstream gives them.
  static const char* unbuilt[] = {"n2", "n3", "reserved"};  // sel 5, 6, 7
  return sel >= 5 && sel <= 7 ? unbuilt[sel - 5] : "";
}

Result<RuleSpec> parseRule(const json& body) {
  if (!body.is_object()) return fail(400, "body", "malformed request: body must be a JSON object");
  for (auto& [k, v] : body.items()) {
    static const std::set<std::string> top = {"serviceArguments", "endpoints",      "secondaryIPs",
                                              "secondaryVIPs",    "allowedSources", "offload_state",
                                              "hw_pkts",          "hw_bytes",
                                              "effective"};  // (GET's read-only blocks: ignored)
    if (!top.count(k)) return bad(k, "unknown field");
  }
  auto sa_it = body.find("serviceArguments");
  if (sa_it == body.end() || !sa_it->is_object())
    return fail(400, "serviceArguments", "serviceArguments is required and must be an object");
  const json& sa = *sa_it;
  json stored = json::object();
  for (auto& [k, v] : sa.items()) {
    const FieldSpec* f = findField(serviceFields(), k);
    if (!f) return bad("serviceArguments." + k, "unknown field");
    if (v.is_null()) continue;
    if (auto r = checkField(*f, "serviceArguments." + k, v); !r) return tl::unexpected(r.error());
    stored[k] = v;
  }
  for (const char* req : {"externalIP", "port", "protocol"})
    if (!stored.contains(req))
      return fail(400, std::string("serviceArguments.") + req,
                  std::string("serviceArguments.") + req + " is required");

  RuleSpec r;
  r.vip = stored["externalIP"];
  r.port = static_cast<uint16_t>(stored["port"].get<int>());
  r.protocol = stored["protocol"];
  r.mode = getOr<int>(stored, "mode", 0);
  if (r.mode != 4 && !isL4Mode(r.mode))
    return fail(400, "serviceArguments.mode",
                "L4 mode " + std::to_string(r.mode) +
                    " is not supported (modes 0 DNAT, 1 one-arm, 2 full NAT, 3 DSR and 5 host "
                    "one-arm on the L4 path of serve --l4-ifaces; mode 4, fullproxy)");
  if (r.mode == 4 && r.protocol != "tcp")
    return bad("serviceArguments.protocol", "mode 4 (fullproxy) requires tcp");
  const std::string l4_name = "mode " + std::to_string(r.mode) + " (" + l4ModeName(r.mode) + ")";
  if (isL4Mode(r.mode) && r.protocol != "tcp" && r.protocol != "udp")
    return bad("serviceArguments.protocol", l4_name + " serves tcp and udp");
  r.sel = getOr<int>(stored, "sel", 0);
  // (upstream's text; upstream answers it with a 200, here it is the 400 it is)
  if (r.mode == 3 && r.sel != 1)
    return bad("serviceArguments.sel", "Only Hash Selection criteria allowed for DSR mode");
  if (isL4Mode(r.mode) && r.sel > 4)
    return bad("serviceArguments.sel",
               "selector " + std::to_string(r.sel) + " (" + selectorName(r.sel) +
                   ") is not available for " + l4_name +
                   "; use 0 (rr), 1 (hash), 2 (wrr), 3 (persist) or 4 (lc)");
  if (r.sel >= 5 && r.sel <= 7)
    return bad("serviceArguments.sel", "selector " + std::to_string(r.sel) + " (" +
                                           selectorName(r.sel) +
                                           ") is not available for mode 4; use 0-4 or 8-10");
  r.host = getOr<std::string>(stored, "host", "");
  if (!validHost(r.host)) return bad("serviceArguments.host", "not a host name");
  r.path_prefix = getOr<std::string>(stored, "path_prefix", "");
  r.path_match_mode = getOr<std::string>(stored, "path_match_mode", "disabled");
  if (!r.path_prefix.empty() && r.path_prefix.front() != '/')
    return bad("serviceArguments.path_prefix", "must start with '/'");
  // Requests are matched on their normalized, decoded path (http/target.h): a prefix with an
  // escape, "//" or a dot segment could never match as written.
  if (!r.path_prefix.empty() && (!http::isCanonicalTarget(r.path_prefix) ||
                                 r.path_prefix.find('?') != std::string::npos))
    return bad("serviceArguments.path_prefix",
               "must be a normalized path: no '%' escapes, '?', '//' or '.' / '..' segments");
  if (r.path_match_mode != "disabled" && r.path_prefix.empty())
    return bad("serviceArguments.path_prefix", "is required when path_match_mode is set");
  stored["path_match_mode"] = r.path_match_mode;
  stored["backend_protocol"] = getOr<std::string>(stored, "backend_protocol", "http1");
  if (!stored.contains("id")) stored["id"] = "";  // minted by the store on create
  r.model_name = getOr<std::string>(stored, "model_name", "");
  r.name = getOr<std::string>(stored, "name", "");
  r.admin_up = getOr<bool>(stored, "adminStateUp", true);
  r.sse_mode = getOr<bool>(stored, "sse_mode", false);
  r.security = getOr<int>(stored, "security", 0);
  auto tls = parseServerTls(stored, r.security);
  if (!tls) return tl::unexpected(tls.error());
  r.tls = std::move(*tls);
  auto backend_tls = parseBackendTls(stored, r.security);
  if (!backend_tls) return tl::unexpected(backend_tls.error());
  r.backend_tls = std::move(*backend_tls);
  // HSTS on TLS rules only: browsers ignore it over plain HTTP (RFC 6797 §8.1), so a plain rule's
  // hsts_* fields are stored and have no effect (a rule saved before HSTS was served keeps
  // loading).
  if (getOr<bool>(stored, "hsts_enable", false) && r.security != 0) {
    // RFC 6797 §6.1: max-age in seconds (0 tells browsers to forget the host's HSTS).
    r.hsts_header = "Strict-Transport-Security: max-age=" +
                    std::to_string(getOr<int64_t>(stored, "hsts_max_age", 31536000));
    if (getOr<bool>(stored, "hsts_include_subdomains", false)) r.hsts_header += "; includeSubDomains";
    if (getOr<bool>(stored, "hsts_preload", false)) r.hsts_header += "; preload";
    r.hsts_header += "\r\n";
  }
  r.max_stream_duration_sec = getOr<int64_t>(stored, "max_stream_duration_sec", 0);
  r.timeout_connect_ms = getOr<int64_t>(stored, "timeoutMemberConnect", 0);
  r.timeout_data_ms = getOr<int64_t>(stored, "timeoutMemberData", 0);
  r.inactive_timeout_sec = getOr<int64_t>(stored, "inactiveTimeOut", 0);
  int port_max = getOr<int>(stored, "portMax", 0);
  if (port_max != 0 && port_max < r.port)
    return bad("serviceArguments.portMax", "must be 0 or at least port");

  bool pd = getOr<bool>(stored, "pd_disagg_mode", false);
  if (getOr<bool>(stored, "pd_cache_aware_mode", false) && !pd)
    return bad("serviceArguments.pd_cache_aware_mode", "requires pd_disagg_mode");
  if (pd && stored.contains("kvPoolingLb"))
    return bad("serviceArguments.kvPoolingLb",
               "applies to single-leg rules (a P/D rule refuses pooling requests)");
  int kv_mode = getOr<int>(stored, "kvExactMode", 0);
  if (kv_mode == 2) return bad("serviceArguments.kvExactMode", "2 is reserved (nats)");
  if (kv_mode == 1 && !pd) return bad("serviceArguments.kvExactMode", "1 requires pd_disagg_mode");
  if (kv_mode == 3 && pd)
    return bad("serviceArguments.kvExactMode", "3 is for single-pool rules (no pd_disagg_mode)");
  if (auto l = checkPdLadder(stored, pd, kv_mode); !l) return tl::unexpected(l.error());
  std::string engine = getOr<std::string>(stored, "kvEngineType", "vllm");
  if (engine == "llamacpp" && (pd || kv_mode != 0))
    return bad("serviceArguments.kvEngineType",
               "llamacpp supports neither P/D nor KV-exact routing");
  if (stored.contains("kvHashAlgo")) {
    std::string algo = stored["kvHashAlgo"];
    bool ok = algo == "xxh3_fingerprint" ||
              (engine == "vllm" && (algo == "sha256_cbor" || algo == "xxhash_cbor")) ||
              (engine == "sglang" && algo == "sha256_sglang") ||
              (engine == "trtllm" && algo == "blockhash_trtllm");
    if (!ok)
      return bad("serviceArguments.kvHashAlgo",
                 "'" + algo + "' does not match kvEngineType '" + engine + "'");
  }
  if (std::string addr = getOr<std::string>(stored, "kvIndexAddr", ""); !addr.empty()) {
    if (kv_mode == 0) return bad("serviceArguments.kvIndexAddr", "requires kvExactMode 1 or 3");
    auto colon = addr.rfind(':');
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < addr.size() &&
              addr.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
              addr.size() - colon - 1 <= 5 && std::stoi(addr.substr(colon + 1)) > 0 &&
              std::stoi(addr.substr(colon + 1)) <= 65535 &&
              addr.find_first_of(" /\t\r\n") == std::string::npos;
    if (!ok) return bad("serviceArguments.kvIndexAddr", "must be HOST:PORT of a kvgate index");
  }
  if (auto sp = stored.find("kvScoringProfile"); sp != stored.end()) {
    if (kv_mode == 0) return bad("serviceArguments.kvScoringProfile", "requires kvExactMode 1 or 3");
    if (stored.contains("kvLbMode"))
      return bad("serviceArguments.kvScoringProfile",
                 "and kvLbMode are exclusive (a profile replaces the law)");
    auto p = parseScoringProfile(*sp, "serviceArguments.kvScoringProfile");
    if (!p) return tl::unexpected(p.error());
  }
  std::string auth = getOr<std::string>(stored, "api_key_auth", "");
  if (stored.contains("jwt_auth_profile") && auth != "jwt" && auth != "apikey-or-jwt")
    return bad("serviceArguments.jwt_auth_profile", "requires api_key_auth jwt or apikey-or-jwt");
  if (auth == "jwt" && getOr<std::string>(stored, "jwt_auth_profile", "").empty())
    return bad("serviceArguments.jwt_auth_profile", "is required when api_key_auth is jwt");
  r.strip_api_key = auth == "disabled" || auth == "required" || auth == "jwt" ||
                    auth == "apikey-or-jwt";
  r.require_api_key = auth == "required";
  r.api_key_auth = auth;
  r.jwt_profile = getOr<std::string>(stored, "jwt_auth_profile", "");
  r.cb_enable = getOr<bool>(stored, "cb_enable", false) || pd;
  r.session_header_name = getOr<std::string>(stored, "session_header_name", "");
  if (r.session_header_name.starts_with("cookie:") || r.session_header_name.starts_with("query:")) {
    if (r.session_header_name.size() == r.session_header_name.find(':') + 1)
      return bad("serviceArguments.session_header_name", "cookie: and query: need a name");
  } else if (r.session_header_name == "basic-auth") {
    // the user name of an Authorization: Basic header
  } else {
    for (unsigned char c : r.session_header_name)
      if (!(std::isalnum(c) || c == '-' || c == '_'))
        return bad("serviceArguments.session_header_name",
                   "must be a header name, cookie:NAME, query:NAME or basic-auth");
  }

  // Endpoints.
  auto ep_it = body.find("endpoints");
  if (ep_it != body.end() && !ep_it->is_null()) {
    if (!ep_it->is_array()) return bad("endpoints", "must be an array");
    if (ep_it->size() > 1024) return bad("endpoints", "at most 1024 endpoints per rule");
    std::set<std::string> seen;
    size_t i = 0;
    for (auto& e : *ep_it) {
      std::string p = "endpoints[" + std::to_string(i++) + "]";
      if (!e.is_object()) return bad(p, "must be an object");
      json ej = json::object();
      for (auto& [k, v] : e.items()) {
        const FieldSpec* f = findField(endpointFields(), k);
        if (!f) return bad(p + "." + k, "unknown field");
        if (v.is_null() || k == "state" || k == "counter") continue;
        if (auto c = checkField(*f, p + "." + k, v); !c) return tl::unexpected(c.error());
        ej[k] = v;
      }
      for (const char* req : {"endpointIP", "targetPort", "weight"})
        if (!ej.contains(req)) return fail(400, p + "." + req, p + "." + req + " is required");
      EndpointSpec es;
      es.ip = ej["endpointIP"];
      es.port = static_cast<uint16_t>(ej["targetPort"].get<int>());
      es.weight = static_cast<uint8_t>(ej["weight"].get<int>());
      es.role = getOr<int>(ej, "ep_role", 0);
      if (r.mode == 3 && es.port != r.port)
        return bad(p + ".targetPort",
                   "mode 3 (DSR) sends packets to the endpoint unchanged: targetPort must be the "
                   "service's port " +
                       std::to_string(r.port));
      if (es.role != 0 && !pd)
        return bad(p + ".ep_role", "prefill/decode roles need pd_disagg_mode");
      std::string id = es.ip + "|" + std::to_string(es.port);
      if (!seen.insert(id).second)
        return bad(p, "duplicate endpoint " + es.ip + ":" + std::to_string(es.port));
      es.json = std::move(ej);
      r.endpoints.push_back(std::move(es));
    }
  }
  if (pd && !r.endpoints.empty()) {
    bool has_p = false, has_d = false;
    for (auto& e : r.endpoints) {
      has_p |= e.role == 1;
      has_d |= e.role == 2;
    }
    if (!has_p || !has_d)
      return bad("endpoints", "pd_disagg_mode needs at least one ep_role 1 and one ep_role 2");
  }

  // Capabilities stored now but served in later milestones: traffic gets 501 not_active.
  auto need = [&](bool cond, const char* cap) {
    if (cond && r.inactive_capability.empty()) r.inactive_capability = cap;
  };
  // Tier 1.5 (mode 1 over prefill endpoints, mode 3 over a single pool), for the engines whose
  // events are followed.
  const std::string kv_engine = getOr<std::string>(stored, "kvEngineType", "vllm");
  need(kv_mode == 3 && kv_engine == "llamacpp", "kv_exact");
  std::string fc = getOr<std::string>(stored, "fc_mode", "off");
  need((fc == "enforce" || fc == "inherit") && !pd, "admission");  // P/D rules: proxy/admission.h
  // Sockmap (upstream: plaintext IPv4 HTTP/1.1 on mode 4, never with SSE, P/D or L7 policy; with
  // api_key_auth only `response`): violations are refused, as upstream's.
  const std::string sockmap = getOr<std::string>(stored, "sockMapMode", "off");
  r.sockmap = sockmap == "request" ? 1 : sockmap == "response" ? 2 : sockmap == "both" ? 3 : 0;
  if (r.sockmap != 0 && r.mode == 4) {
    const std::string bp = getOr<std::string>(stored, "backend_protocol", "http1");
    const char* why = r.security != 0 ? "needs a plaintext rule (security 0)"
                      : r.sse_mode    ? "cannot be used with sse_mode (every event is read)"
                      : pd            ? "cannot be used with pd_disagg_mode"
                      : bp != "http1" ? "needs backend_protocol http1 (HTTP/2 is never accelerated)"
                      : !r.api_key_auth.empty() && r.api_key_auth != "disabled" && r.sockmap != 2
                          ? "with api_key_auth only 'response' is allowed"
                          : nullptr;
    if (why) return bad("serviceArguments.sockMapMode", why);
  }
  need(r.sockmap != 0 && r.mode != 4, "sockmap");
  need(getOr<int64_t>(stored, "connectionLimit", 0) != 0, "connection_limit");
  need(port_max != 0 && port_max != r.port, "port_range");
  need(getOr<bool>(stored, "proxyprotocolv2", false), "proxy_protocol");
  // TLS to the engines with certificates named by id from a certificate store: this build has
  // no store, and serving without the CA or client certificate asked for would be weaker than
  // the operator meant. (On other rules the ids mean nothing; vip_qos_policy_id: stored.)
  // (An id beside the same material given in mtls_backend is redundant and served.)
  const bool ca_missing = !getOr<std::string>(stored, "backend_ca_cert_id", "").empty() &&
                          r.backend_tls.ca_path.empty();
  const bool client_missing = !getOr<std::string>(stored, "backend_client_cert_id", "").empty() &&
                              r.backend_tls.cert_path.empty() && r.backend_tls.cert_pem.empty();
  need(r.security == 2 && (ca_missing || client_missing), "certificate_store");
  for (const char* k : {"secondaryIPs", "secondaryVIPs", "allowedSources"}) {
    auto it = body.find(k);
    if (it != body.end() && !it->is_null()) {
      if (!it->is_array() || it->size() > 256) return bad(k, "must be an array");
      for (auto& e : *it)
        if (!e.is_object()) return bad(k, "must be an array of objects");
      if (!it->empty()) {
        stored["_" + std::string(k)] = *it;  // kept for GET, see toJson()
        need(std::string(k) == "allowedSources", "allowed_sources");
      }
    }
  }
  // Modes 0-2 are forwarded packet by packet (src/l4): nothing of a request is read, so the
  // fields that need one are refused, not stored inert.
  if (isL4Mode(r.mode)) {
    const char* l7 = !r.host.empty()                                           ? "host"
                     : !r.path_prefix.empty()                                  ? "path_prefix"
                     : !r.model_name.empty()                                   ? "model_name"
                     : r.security != 0                                         ? "security"
                     : r.sse_mode                                              ? "sse_mode"
                     : pd                                                      ? "pd_disagg_mode"
                     : kv_mode != 0                                            ? "kvExactMode"
                     : !r.api_key_auth.empty() && r.api_key_auth != "disabled" ? "api_key_auth"
                     : !getOr<std::string>(stored, "selector", "").empty()     ? "selector"
                     : !r.inactive_capability.empty() ? r.inactive_capability.c_str()
                                                      : nullptr;
    if (l7)
      return bad(
          std::string("serviceArguments.") + l7,
          "is a mode 4 (fullproxy) field; " + l4_name + " forwards packets and reads no request");
    // (before sel 3 was served on L4 rules the field was stored on them inert: still accepted
    // with other selectors, so such a stored rule loads)
    if (r.sel == 3 && !r.session_header_name.empty())
      return bad("serviceArguments.session_header_name",
                 "sel 3 (persist) on " + l4_name +
                     " keeps each client address on its endpoint; no header is read");
    if (r.cb_enable && (r.mode == 3 || r.protocol == "udp"))
      return bad("serviceArguments.cb_enable",
                 "the circuit breaker of an L4 rule reads the TCP connects this node sees; " +
                     std::string(r.mode == 3 ? "a DSR endpoint answers the client directly"
                                             : "udp has none"));
  }
  r.service_args = std::move(stored);
  return r;
}

Result<RuleSpec> parseRuleText(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return fail(400, "body", "malformed JSON");
  return parseRule(j);
}

std::string RuleSpec::key() const {
  return host + "|" + path_prefix + "|" + path_match_mode + "|model:" + model_name + "|" + vip +
         ":" + std::to_string(port) + "/" + protocol;
}

std::string RuleSpec::listenKey() const { return vip + ":" + std::to_string(port); }

json RuleSpec::toJson() const {
  json sa = json::object();
  json extras = json::object();
  for (auto& [k, v] : service_args.items()) {
    if (k.starts_with("_")) {
      extras[k.substr(1)] = v;
      continue;
    }
    if (k.starts_with("chwbl_") && sel != 8 && sel != 10) continue;
    if (k == "session_header_name" && sel != 0 && sel != 3) continue;
    // (zeros are left out, as upstream's GET does, except where the default is not zero:
    // adminStateUp false and hsts_max_age 0 must survive GET -> POST, or a disabled rule would
    // come back enabled and "forget HSTS" would become a one-year pin)
    if (k == "backend_protocol" || k == "mode" || k == "adminStateUp" || k == "hsts_max_age" ||
        !isZero(v))
      sa[k] = v;
  }
  sa["mode"] = mode;
  // An inline private key is never read back (it stays in the 0600 state file only).
  if (auto m = sa.find("mtls_backend"); m != sa.end() && m->is_object() &&
                                        m->contains("client_key_data"))
    (*m)["client_key_data"] = "(redacted)";
  json eps = json::array();
  for (auto& e : endpoints) {
    json ej;
    for (auto& [k, v] : e.json.items())
      if (!isZero(v) || k == "weight") ej[k] = v;
    ej["state"] = "active";
    ej["counter"] = "0:0";
    eps.push_back(std::move(ej));
  }
  json out = {{"serviceArguments", sa}, {"endpoints", eps}};
  for (const char* k : {"secondaryIPs", "allowedSources"})
    out[k] = extras.contains(k) ? extras[k] : json(nullptr);
  if (extras.contains("secondaryVIPs")) out["secondaryVIPs"] = extras["secondaryVIPs"];
  return out;
}

bool RuleSpec::sameDefinition(const RuleSpec& o) const {
  if (endpoints.size() != o.endpoints.size()) return false;
  for (size_t i = 0; i < endpoints.size(); ++i)
    if (endpoints[i].json != o.endpoints[i].json) return false;
  json a = service_args, b = o.service_args;
  a.erase("id");
  b.erase("id");
  return a == b;
}

}  // namespace kvgate::config
