#include "proxy/listener_tls.h"

namespace kvgate::proxy {
namespace {

// The identity of a set of TLS fields (length-prefixed, so no two sets share one).
std::string optionsKey(const http::ServerTlsOptions& o) {
  std::string k;
  auto add = [&k](const std::string& s) { k += std::to_string(s.size()) + ":" + s; };
  k += std::to_string(int(o.client_cert)) + (o.require_client_cn ? "c" : "-") +
       (o.tls12 ? "2" : "-") + (o.tls13 ? "3" : "-");
  add(o.client_ca_path);
  add(o.client_ca_pem);
  add(o.client_crl_path);
  add(o.client_cn_pattern);
  add(o.ciphers);
  return k;
}

}  // namespace

Result<ListenerTls::Plan> ListenerTls::plan(const std::vector<config::RuleSpec>& rules) {
  std::map<std::string, const config::RuleSpec*> first;  // the first rule seen per listener
  for (const auto& rule : rules) {
    if (rule.security == 1 && !base_)
      return fail(400, "security",
                  "security 1 terminates TLS at the gateway: start serve with --tls-cert and "
                  "--tls-key");
    auto [it, fresh] = first.emplace(rule.listenKey(), &rule);
    if (fresh) continue;
    const config::RuleSpec& other = *it->second;
    if ((other.security == 1) != (rule.security == 1))
      return fail(400, "security",
                  "rules on " + rule.listenKey() +
                      " disagree on security: a listener is either TLS (1) or plain");
    if (rule.security == 1 && !(other.tls == rule.tls))
      return fail(400, "mtls_frontend",
                  "rules on " + rule.listenKey() +
                      " must have the same mtls_frontend, tls_versions and tls_ciphers (one TLS "
                      "handshake serves them all)");
  }
  Plan plan;
  std::map<std::string, std::shared_ptr<http::TlsFiles>> loaded;
  for (auto& [listen, rule] : first) {
    if (rule->security != 1) continue;
    if (rule->tls == http::ServerTlsOptions{}) {
      plan[listen] = base_;
      continue;
    }
    const std::string key = optionsKey(rule->tls);
    auto& files = loaded[key];
    if (!files) {
      if (auto it = by_options_.find(key); it != by_options_.end()) {
        files = it->second;
      } else {
        auto t = http::TlsFiles::load(base_->certFile(), base_->keyFile(), rule->tls, stats_);
        if (!t) return tl::unexpected(t.error());
        files = std::move(*t);
      }
    }
    plan[listen] = files;
  }
  return plan;
}

void ListenerTls::commit(const Plan& plan) {
  by_options_.clear();
  for (auto& [listen, files] : plan)
    if (files != base_) by_options_[optionsKey(files->options())] = files;
}

void ListenerTls::refresh() {
  if (base_) base_->refresh();
  for (auto& [key, files] : by_options_) files->refresh();
}

}  // namespace kvgate::proxy
