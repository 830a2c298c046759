// What a TLS listener asks of its clients, from a rule's `mtls_frontend`, `tls_versions` and
// `tls_ciphers` (plain data: config parses it, http/tls.cc builds the SSL context from it).
//
// Client certificates (`mtls_frontend.client_cert_mode`):
//   disabled  no certificate is asked for (the default);
//   optional  one is asked for; a client without one proceeds, one with a certificate that does
//             not verify (unknown issuer, expired, revoked, name mismatch) fails the handshake;
//   required  a client without a verified certificate fails the handshake.
// Verification: the chain against `client_ca_path` (a PEM bundle) or `client_ca_cert_data` (PEM
// text), depth at most 10; with `client_crl_path` the leaf is also checked against that CRL
// (leaf only, as HAProxy does by default); with `require_client_cn` the leaf's identity must match
// `client_cn_pattern`, a shell wildcard (fnmatch, case-insensitive), tried against each DNS
// subjectAltName, and against the subject CN only when the certificate has no DNS names
// (RFC 6125).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvgate::http {

struct ServerTlsOptions {
  enum class ClientCert : uint8_t { kDisabled, kOptional, kRequired };
  ClientCert client_cert = ClientCert::kDisabled;
  std::string client_ca_path;  // PEM bundle of the CAs that sign client certificates
  std::string client_ca_pem;   // the same, inline (client_ca_cert_data)
  std::string client_crl_path;
  bool require_client_cn = false;
  std::string client_cn_pattern;
  bool tls12 = true, tls13 = true;  // tls_versions (TLS 1.0/1.1 are never offered)
  std::string ciphers;              // tls_ciphers, OpenSSL syntax; TLS_* names are 1.3 suites
  // ALPN offers h2: data-plane listeners whose rules' alpn_protocols name it or are absent
  // (config/tls_fields.cc), with serve --http2 on. Off for every other server (management API,
  // simulator): they speak HTTP/1.1 only.
  bool h2 = false;

  bool operator==(const ServerTlsOptions&) const = default;
  bool verifiesClients() const { return client_cert != ClientCert::kDisabled; }
};

// The names in a `tls_ciphers` list (separated by ':', ',' or spaces); TLS_* names are TLS 1.3
// suites, the others OpenSSL's TLS 1.2 cipher names.
inline std::vector<std::string> cipherNames(const std::string& spec) {
  std::vector<std::string> out;
  for (size_t i = 0; i <= spec.size();) {
    size_t j = spec.find_first_of(":, ", i);
    if (j == std::string::npos) j = spec.size();
    if (j > i) out.push_back(spec.substr(i, j - i));
    i = j + 1;
  }
  return out;
}
inline bool isTls13Suite(const std::string& name) { return name.rfind("TLS_", 0) == 0; }

// TLS from the gateway to a rule's engines (`security: 2`, its `mtls_backend`): TLS 1.2 or 1.3,
// ALPN http/1.1. `verify_server_cert` (default false, as upstream) checks the engine's chain
// against `backend_ca_path` (else the system's CAs) and its name (the endpoint's domainName, else
// its IP address); a client certificate and key (files, or PEM inline) are presented when given.
struct ClientTlsOptions {
  bool verify_server_cert = false;
  std::string ca_path;
  std::string cert_path, key_path;  // client_cert_path, client_key_path
  std::string cert_pem, key_pem;    // client_cert_data, client_key_data
  bool operator==(const ClientTlsOptions&) const = default;
};

}  // namespace kvgate::http
