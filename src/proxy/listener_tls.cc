#include "proxy/listener_tls.h"

namespace kvgate::proxy {
namespace {

// The identity of a set of TLS fields (length-prefixed, so no two sets share one).
std::string optionsKey(const http::ServerTlsOptions& o) {
  std::string k;
  auto add = [&k](const std::string& s) { k += std::to_string(s.size()) + ":" + s; };
  k += std::to_string(int(o.client_cert)) + (o.require_client_cn ? "c" : "-") +
       (o.tls12 ? "2" : "-") + (o.tls13 ? "3" : "-") + (o.h2 ? "h" : "-");
  add(o.client_ca_path);
  add(o.client_ca_pem);
  add(o.client_crl_path);
  add(o.client_cn_pattern);
  add(o.ciphers);
  return k;
}

std::string backendKey(const http::ClientTlsOptions& o) {
  std::string k = o.verify_server_cert ? "v" : "-";
  for (const std::string* s : {&o.ca_path, &o.cert_path, &o.key_path, &o.cert_pem, &o.key_pem})
    k += std::to_string(s->size()) + ":" + *s;
  return k;
}

}  // namespace

std::shared_ptr<http::TlsFiles> ListenerTls::probe() {
  if (!probe_)
    if (auto t = http::TlsFiles::loadBackend({}); t) probe_ = std::move(*t);
  return probe_;
}

Result<ListenerTls::Plan> ListenerTls::plan(const std::vector<config::RuleSpec>& rules) {
  std::map<std::string, const config::RuleSpec*> first;  // the first rule seen per listener
  for (const auto& rule : rules) {
    if (rule.security >= 1 && !base_)
      return fail(400, "security",
                  "security " + std::to_string(rule.security) +
                      " terminates TLS at the gateway: start serve with --tls-cert and --tls-key");
    auto [it, fresh] = first.emplace(rule.listenKey(), &rule);
    if (fresh) continue;
    const config::RuleSpec& other = *it->second;
    if ((other.security >= 1) != (rule.security >= 1))
      return fail(400, "security",
                  "rules on " + rule.listenKey() +
                      " disagree on security: a listener is either TLS (1, 2) or plain (0)");
    http::ServerTlsOptions a = other.tls, b = rule.tls;
    a.h2 = a.h2 && http2_;  // (with --http2 off, alpn_protocols make no difference)
    b.h2 = b.h2 && http2_;
    if (rule.security >= 1 && !(a == b))
      return fail(400, a.h2 != b.h2 ? "alpn_protocols" : "mtls_frontend",
                  "rules on " + rule.listenKey() +
                      " must have the same mtls_frontend, tls_versions, tls_ciphers and "
                      "alpn_protocols (one TLS handshake serves them all)");
  }
  Plan plan;
  std::map<std::string, std::shared_ptr<http::TlsFiles>> loaded;
  for (auto& [listen, rule] : first) {
    if (rule->security < 1) continue;
    http::ServerTlsOptions o = rule->tls;
    o.h2 = o.h2 && http2_;  // (serve --http2 off: never offered)
    if (o == base_->options()) {
      plan.listeners[listen] = base_;
      continue;
    }
    const std::string key = optionsKey(o);
    auto& files = loaded[key];
    if (!files) {
      if (auto it = by_options_.find(key); it != by_options_.end()) {
        files = it->second;
      } else {
        auto t = http::TlsFiles::load(base_->certFile(), base_->keyFile(), o, stats_);
        if (!t) return tl::unexpected(t.error());
        files = std::move(*t);
      }
    }
    plan.listeners[listen] = files;
  }
  for (const auto& rule : rules) {
    if (rule.security != 2) continue;
    const std::string key = backendKey(rule.backend_tls);
    auto& files = loaded["b" + key];
    if (!files) {
      if (auto it = backends_.find(key); it != backends_.end()) {
        files = it->second;
      } else {
        auto t = http::TlsFiles::loadBackend(rule.backend_tls);
        if (!t) return tl::unexpected(t.error());
        files = std::move(*t);
      }
    }
    plan.backends[rule.key()] = files;
  }
  return plan;
}

void ListenerTls::commit(const Plan& plan) {
  by_options_.clear();
  for (auto& [listen, files] : plan.listeners)
    if (files != base_) by_options_[optionsKey(files->options())] = files;
  backends_.clear();
  for (auto& [rule, files] : plan.backends) backends_[backendKey(files->backendOptions())] = files;
  by_rule_ = plan.backends;
}

void ListenerTls::refresh() {
  if (base_) base_->refresh();
  for (auto& [key, files] : by_options_) files->refresh();
  for (auto& [key, files] : backends_) files->refresh();
}

}  // namespace kvgate::proxy
