#include "config/tls_fields.h"

#include <set>

namespace kvgate::config {
namespace {
using nlohmann::json;
using Options = http::ServerTlsOptions;

tl::unexpected<Error> bad(const std::string& field, const std::string& what) {
  return fail(400, field, "invalid serviceArguments." + field + ": " + what);
}

// A string member of `obj` (absent: ""), at most `max` bytes, no NUL or line breaks unless `text`.
Result<std::string> stringMember(const json& obj, const char* name, size_t max, bool text,
                                 const char* parent = "mtls_frontend") {
  const std::string field = std::string(parent) + "." + name;
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) return bad(field, "must be a string");
  std::string v = it->get<std::string>();
  if (v.size() > max) return bad(field, "longer than " + std::to_string(max) + " bytes");
  for (unsigned char c : v)
    if (c == 0 || (!text && c < 0x20)) return bad(field, "contains a control character");
  return v;
}

Result<void> parseFrontend(const json& m, int security, Options& o) {
  static const std::set<std::string> kKnown = {"client_cert_mode", "client_ca_path",
                                               "client_ca_cert_data", "require_client_cn",
                                               "client_cn_pattern", "client_crl_path"};
  for (auto& [k, v] : m.items())
    if (!kKnown.count(k)) return bad("mtls_frontend." + k, "unknown field");
  auto mode = stringMember(m, "client_cert_mode", 16, false);
  if (!mode) return tl::unexpected(mode.error());
  if (*mode == "" || *mode == "disabled") o.client_cert = Options::ClientCert::kDisabled;
  else if (*mode == "optional") o.client_cert = Options::ClientCert::kOptional;
  else if (*mode == "required") o.client_cert = Options::ClientCert::kRequired;
  else return bad("mtls_frontend.client_cert_mode", "must be disabled, optional or required");
  auto ca = stringMember(m, "client_ca_path", 4096, false);
  auto pem = stringMember(m, "client_ca_cert_data", 1 << 20, true);
  auto crl = stringMember(m, "client_crl_path", 4096, false);
  auto pattern = stringMember(m, "client_cn_pattern", 255, false);
  for (auto* r : {&ca, &pem, &crl, &pattern})
    if (!*r) return tl::unexpected(r->error());
  o.client_ca_path = *ca;
  o.client_ca_pem = *pem;
  o.client_crl_path = *crl;
  o.client_cn_pattern = *pattern;
  if (auto it = m.find("require_client_cn"); it != m.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("mtls_frontend.require_client_cn", "must be a boolean");
    o.require_client_cn = it->get<bool>();
  }
  if (!o.verifiesClients()) return {};  // (the other members are stored, not used)
  if (security != 1 && security != 2)
    return bad("mtls_frontend.client_cert_mode",
               "client certificates need TLS on the listener (security 1 or 2)");
  if (o.client_ca_path.empty() && o.client_ca_pem.empty())
    return bad("mtls_frontend.client_ca_path",
               "client_ca_path or client_ca_cert_data is required to verify client certificates");
  if (o.require_client_cn && o.client_cn_pattern.empty())
    return bad("mtls_frontend.client_cn_pattern", "is required when require_client_cn is true");
  if (!o.require_client_cn && !o.client_cn_pattern.empty())
    return bad("mtls_frontend.require_client_cn",
               "must be true for client_cn_pattern to be enforced (a pattern that is not "
               "checked is refused rather than ignored)");
  return {};
}

Result<void> parseVersions(const json& v, Options& o) {
  if (!v.is_array() || v.empty() || v.size() > 8)
    return bad("tls_versions", "must be a non-empty array of TLSv1.2 / TLSv1.3");
  o.tls12 = o.tls13 = false;
  for (auto& e : v) {
    const std::string s = e.is_string() ? e.get<std::string>() : "";
    if (s == "TLSv1.2" || s == "TLSv1_2" || s == "1.2") o.tls12 = true;
    else if (s == "TLSv1.3" || s == "TLSv1_3" || s == "1.3") o.tls13 = true;
    else
      return bad("tls_versions", "'" + s.substr(0, 32) +
                                     "' is not offered (TLS 1.2 and 1.3 only: TLSv1.2, TLSv1.3)");
  }
  return {};
}

}  // namespace

Result<http::ClientTlsOptions> parseBackendTls(const json& sa, int security) {
  http::ClientTlsOptions o;
  auto it = sa.find("mtls_backend");
  if (it == sa.end() || it->is_null()) return o;
  const json& m = *it;
  if (!m.is_object()) return bad("mtls_backend", "must be an object");
  if (security != 2)
    return bad("mtls_backend", "TLS to the engines needs security 2 (re-encryption)");
  static const std::set<std::string> kKnown = {"verify_server_cert", "backend_ca_path",
                                               "client_cert_path",   "client_key_path",
                                               "client_cert_data",   "client_key_data"};
  for (auto& [k, v] : m.items())
    if (!kKnown.count(k)) return bad("mtls_backend." + k, "unknown field");
  if (auto v = m.find("verify_server_cert"); v != m.end() && !v->is_null()) {
    if (!v->is_boolean()) return bad("mtls_backend.verify_server_cert", "must be a boolean");
    o.verify_server_cert = v->get<bool>();
  }
  auto ca = stringMember(m, "backend_ca_path", 4096, false, "mtls_backend");
  auto cert = stringMember(m, "client_cert_path", 4096, false, "mtls_backend");
  auto key = stringMember(m, "client_key_path", 4096, false, "mtls_backend");
  auto cert_pem = stringMember(m, "client_cert_data", 1 << 20, true, "mtls_backend");
  auto key_pem = stringMember(m, "client_key_data", 1 << 20, true, "mtls_backend");
  for (auto* r : {&ca, &cert, &key, &cert_pem, &key_pem})
    if (!*r) return tl::unexpected(r->error());
  o.ca_path = *ca;
  o.cert_path = *cert;
  o.key_path = *key;
  o.cert_pem = *cert_pem;
  o.key_pem = *key_pem;
  if (!o.cert_path.empty() && !o.cert_pem.empty())
    return bad("mtls_backend.client_cert_data", "give client_cert_path or client_cert_data, not both");
  if (!o.key_path.empty() && !o.key_pem.empty())
    return bad("mtls_backend.client_key_data", "give client_key_path or client_key_data, not both");
  if (!o.ca_path.empty() && !o.verify_server_cert)
    return bad("mtls_backend.backend_ca_path",
               "is used only with verify_server_cert: true (refused rather than ignored)");
  const bool has_cert = !o.cert_path.empty() || !o.cert_pem.empty();
  const bool has_key = !o.key_path.empty() || !o.key_pem.empty();
  if (has_cert != has_key)
    return bad("mtls_backend.client_key_path", "a client certificate and its key go together");
  return o;
}

Result<http::ServerTlsOptions> parseServerTls(const json& sa, int security) {
  Options o;
  o.h2 = true;  // (a data-plane listener: h2 unless alpn_protocols leaves it out)
  if (auto it = sa.find("mtls_frontend"); it != sa.end() && !it->is_null()) {
    if (!it->is_object()) return bad("mtls_frontend", "must be an object");
    if (auto r = parseFrontend(*it, security, o); !r) return tl::unexpected(r.error());
  }
  if (auto it = sa.find("tls_versions"); it != sa.end() && !it->is_null())
    if (auto r = parseVersions(*it, o); !r) return tl::unexpected(r.error());
  if (auto it = sa.find("tls_ciphers"); it != sa.end() && it->is_string()) {
    o.ciphers = it->get<std::string>();
    for (unsigned char c : o.ciphers)
      if (c < 0x20 || c > 0x7e) return bad("tls_ciphers", "must be printable ASCII");
    // TLS_* names are TLS 1.3 suites, which OpenSSL would skip silently when unknown: only the
    // five it knows are accepted (TLS 1.2 ciphers use OpenSSL's names, checked when loaded).
    static const std::set<std::string> k13 = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                                              "TLS_CHACHA20_POLY1305_SHA256",
                                              "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"};
    for (const std::string& name : http::cipherNames(o.ciphers))
      if (http::isTls13Suite(name) && !k13.count(name))
        return bad("tls_ciphers", "'" + name.substr(0, 64) +
                                      "' is not a TLS 1.3 suite (use OpenSSL names for TLS 1.2 "
                                      "ciphers, e.g. ECDHE-ECDSA-AES128-GCM-SHA256)");
  }
  if (auto it = sa.find("alpn_protocols"); it != sa.end() && it->is_array() && !it->empty()) {
    bool h1 = false, h2 = false;  // (other names: stored, never offered)
    for (auto& e : *it) {
      h1 |= e.is_string() && e.get<std::string>() == "http/1.1";
      h2 |= e.is_string() && e.get<std::string>() == "h2";
    }
    if (!h1)
      return bad("alpn_protocols",
                 "must include http/1.1 (clients without ALPN, or without h2, "
                 "speak it)");
    o.h2 = h2;
  }
  return o;
}

}  // namespace kvgate::config
