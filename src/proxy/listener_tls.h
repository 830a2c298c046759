// The TLS contexts of the data plane (control thread only): its listeners' and, for rules with
// security 2, the client contexts of TLS to their engines.
//
// A listener (VIP:port) with security 1 or 2 rules terminates TLS before any request names a
// host, path or model, so every rule on it must agree on TLS: all TLS (1 or 2) or none, and the same
// `mtls_frontend`, `tls_versions` and `tls_ciphers` (a 400 otherwise). Listeners with equal TLS
// fields share one context; the certificate is serve's `--tls-cert/--tls-key`. plan() loads what a
// rule set needs (a client CA bundle or CRL that does not load is a 400, and nothing changes);
// commit() keeps the contexts in use so refresh() (every second) picks up renewed certificates,
// CA bundles and CRLs. A rule with security 2 gets a client context from its `mtls_backend`
// (rules with equal fields share one, and so share pooled connections); `probe()` is the
// non-verifying context of `probetype: https` probes on other rules.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/rule.h"
#include "http/tls.h"

namespace kvgate::proxy {

class ListenerTls {
 public:
  struct Plan {
    std::map<std::string, std::shared_ptr<http::TlsFiles>> listeners;  // by vip:port
    std::map<std::string, std::shared_ptr<http::TlsFiles>> backends;   // by rule key
    // A rule's TLS to its engines (null: plain).
    std::shared_ptr<http::TlsFiles> backendFor(const config::RuleSpec& r) const {
      auto b = backends.find(r.key());
      return b != backends.end() ? b->second : nullptr;
    }
  };
  // `http2`: serve --http2 (off: ALPN never offers h2, whatever the rules say).
  ListenerTls(std::shared_ptr<http::TlsFiles> base, bool http2)
      : base_(std::move(base)), http2_(http2) {}
  Result<Plan> plan(const std::vector<config::RuleSpec>& rules);
  void commit(const Plan& plan);
  void refresh();
  const http::ClientCertStats& clientCerts() const { return *stats_; }
  std::shared_ptr<http::TlsFiles> probe();
  // The committed plan's TLS to a rule's engines (null: plain). Control thread.
  std::shared_ptr<http::TlsFiles> backendFor(const config::RuleSpec& r) const {
    auto b = by_rule_.find(r.key());
    return b != by_rule_.end() ? b->second : nullptr;
  }

 private:
  std::shared_ptr<http::TlsFiles> base_;  // serve's certificate, default TLS fields
  bool http2_ = true;
  std::map<std::string, std::shared_ptr<http::TlsFiles>> by_options_;  // in use, by TLS fields
  std::map<std::string, std::shared_ptr<http::TlsFiles>> backends_;    // in use, by mtls_backend
  std::map<std::string, std::shared_ptr<http::TlsFiles>> by_rule_;     // in use, by rule key
  std::shared_ptr<http::TlsFiles> probe_;
  std::shared_ptr<http::ClientCertStats> stats_ = std::make_shared<http::ClientCertStats>();
};

}  // namespace kvgate::proxy
