// The load-balancer rule model of the management API (`LoadbalanceEntry`), validated.
//
// parseRule() turns a POST body into a RuleSpec or a 400 naming the offending field; nothing is
// half-applied. The validated serviceArguments are kept as JSON too, so GET returns what was
// stored (with Go-style omitempty, as the upstream gateway serialises it).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "http/tls_options.h"

namespace kvgate::config {

struct EndpointSpec {
  std::string ip;
  uint16_t port = 0;
  uint8_t weight = 1;
  int role = 0;         // 0 normal, 1 prefill, 2 decode
  nlohmann::json json;  // validated endpoint object as stored
};

struct RuleSpec {
  // Identity (part of the rule key).
  std::string vip;
  uint16_t port = 0;
  std::string protocol = "tcp";
  std::string host;
  std::string path_prefix;
  std::string path_match_mode = "disabled";  // disabled | prefix | exact
  std::string model_name;                    // "" = catch-all pool
  // Behaviour used by the data plane now.
  std::string name;
  int sel = 0;
  int mode = 4;  // 0 DNAT, 1 one-arm, 2 full NAT, 3 DSR, 5 host one-arm (src/l4); 4 fullproxy
  bool admin_up = true;
  bool sse_mode = false;
  // sockMapMode: 0 off, 1 request, 2 response, 3 both; response bodies of 2 and 3 are spliced in
  // the kernel (src/sockmap), request bodies are read by the gateway, which routes on them.
  int sockmap = 0;
  int security = 0;  // 0 plain, 1 TLS terminated at the gateway, 2 and TLS to the engines
  http::ServerTlsOptions tls;  // mtls_frontend, tls_versions, tls_ciphers (security 1, 2)
  http::ClientTlsOptions backend_tls;  // mtls_backend (security 2: TLS to the engines)
  // hsts_enable (security 1, 2): the "Strict-Transport-Security: ...\r\n" line every answer of
  // the rule carries (hsts_max_age, omitted = 31536000; hsts_include_subdomains, hsts_preload);
  // "" = none.
  std::string hsts_header;
  int64_t max_stream_duration_sec = 0;  // 0 = 86400
  int64_t timeout_connect_ms = 0;       // 0 = 500
  int64_t timeout_data_ms = 0;          // 0 = default (see proxy options)
  int64_t inactive_timeout_sec = 0;     // 0 = default client idle timeout
  bool cb_enable = false;               // circuit breaker on the endpoints (cb_enable)
  std::string session_header_name;      // sel 3: header, cookie:NAME, query:NAME or basic-auth
  bool strip_api_key = false;           // api_key_auth: "disabled" or "required"
  bool require_api_key = false;         // api_key_auth: "required" (governance/api_keys.h)
  std::string api_key_auth;             // "", disabled, required, jwt, apikey-or-jwt
  std::string jwt_profile;              // jwt_auth_profile (jwt, apikey-or-jwt)
  // The first capability this rule needs that this build does not provide ("" = none); traffic
  // to such a rule gets 501 not_active naming it.
  std::string inactive_capability;
  std::vector<EndpointSpec> endpoints;
  nlohmann::json service_args;  // validated serviceArguments as stored (defaults filled)

  std::string key() const;        // upstream ruleKey order: host|path|match|model|vip:port/proto
  std::string listenKey() const;  // vip:port
  nlohmann::json toJson() const;  // LoadbalanceEntry as GET /all returns it
  bool sameDefinition(const RuleSpec& o) const;  // identical serviceArguments and endpoints
};

// Parses and validates one POST /netlox/v1/config/loadbalancer body.
Result<RuleSpec> parseRule(const nlohmann::json& body);
// Same, for a rule restored from the state file (identical rules, identical checks).
Result<RuleSpec> parseRuleText(std::string_view text);

// Human name of a selector value ("rr", "wrr", "chwbl", ...); "" when out of range.
const char* selectorName(int sel);

// The modes the L4 data path forwards (src/l4): 0 DNAT, 1 one-arm, 2 full NAT, 3 DSR, 5 host
// one-arm.
inline bool isL4Mode(int mode) { return (mode >= 0 && mode <= 3) || mode == 5; }
inline const char* l4ModeName(int mode) {
  return mode == 0   ? "DNAT"
         : mode == 1 ? "one-arm"
         : mode == 2 ? "full NAT"
         : mode == 3 ? "DSR"
         : mode == 5 ? "host one-arm"
                     : "?";
}

}  // namespace kvgate::config
