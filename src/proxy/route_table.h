// The data plane's immutable view of the rules on one VIP:port, published as a snapshot.
//
// The control thread builds a new VipConfig on every change and publishes it atomically; a
// request keeps the snapshot it started with (shared_ptr), so updates never disturb it.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/rule.h"
#include "engines/pd_dialect.h"
#include "http/asio.h"
#include "proxy/admission.h"
#include "proxy/backend_protocol.h"
#include "proxy/filters/filter_chain.h"
#include "proxy/rule_stats.h"
#include "proxy/tokenize_local.h"
#include "routing/eligibility/eligibility.h"
#include "routing/pipeline.h"

namespace kvgate::http {
class TlsFiles;
}

namespace kvgate::proxy {

struct Route {
  config::RuleSpec rule;
  std::vector<routing::PoolEndpoint> endpoints;
  std::vector<tcp::endpoint> addresses;         // one per endpoint, same order
  // P/D: the tables of Tier 0 (session) and Tier 1 (prefix_trie) when the ladder has them, shared
  // with the rule's stats across snapshots (this route keeps them alive while a request uses it).
  // With Tier 0 a pinned conversation may stay on a DRAINING prefill endpoint, which the stage
  // takes out for the rest; without it (pdLadder) the prefill candidates lose DRAINING endpoints
  // before any stage, and nothing is pinned. (Declared before the pipelines, whose stages refer
  // to them: destroyed after them.)
  std::shared_ptr<routing::SessionTable> sessions;
  std::shared_ptr<routing::PrefixTrie> trie;
  std::unique_ptr<routing::Pipeline> pipeline;  // null when the rule's selector is inactive
  routing::Eligibility eligibility;  // the candidate filters every pick honours, before any stage
  uint32_t needs = 0;                           // FactNeeds of the pipeline's stages
  uint32_t kv_block_tokens = 16;                // kvBlockSize (queued prefill in tokens)
  std::shared_ptr<RuleStats> stats;             // survives snapshots (kept by rule key)
  std::vector<std::shared_ptr<StatusCounters>> ep_counters;  // per endpoint, same order
  // P/D rules (pd_disagg_mode; proxy/pd_forward.cc): `pipeline` picks the prefill endpoint,
  // `decode_pipeline` the decode one, `rescue_pipeline` a role-less one when no pair can be
  // formed (null: the rule has no ep_role 0 endpoint).
  std::optional<engines::pd::Dialect> pd_dialect;  // nullopt: not a P/D rule
  std::unique_ptr<routing::Pipeline> decode_pipeline;
  std::unique_ptr<routing::Pipeline> rescue_pipeline;
  // Single-leg rules: the pipeline of pooling requests (embeddings, rerank, score, classify):
  // least loaded (min_load), no prefix affinity; null (the rule's own pipeline) with kvPoolingLb
  // "rule", or "auto" on a rule whose selector keys requests (hash, persist, chwbl, ...).
  std::unique_ptr<routing::Pipeline> pooling_pipeline;
  std::vector<std::string> transfer_addr;  // per endpoint: "ip:nixl_port" (P/D request ids)
  uint16_t bootstrap_port = 8998;          // SGLang's bootstrap port (pdBootstrapPort)
  // Breaker and passive detection for this rule's endpoints: the data plane's options, with the
  // seed's P/D breaker (3 failures, 30 s) for P/D rules.
  endpoints::HealthOptions health;
  AdmissionConfig admission;  // P/D rules: the admission gate (proxy/admission.h)
  // The gates a request passes before it is routed (proxy/filters/request_filter.h), in order.
  std::vector<RequestFilter> filters;
  // security 2: TLS to the engines with this client context; the name each endpoint's
  // certificate must carry (its domainName, else its IP), same order as `endpoints`.
  std::shared_ptr<http::TlsFiles> backend_tls;
  std::vector<std::string> tls_names;
  // backend_protocol: HTTP/1.1, HTTP/2 (h2/upstream_session.h) or both (the engine's choice).
  BackendProtocol backend = BackendProtocol::kHttp1;
  // Single-leg rules: whose /tokenize and /detokenize answers the gateway computes
  // (tokenize_local.h; kOff: forwarded), and how often an answerable one is checked.
  TokenizeDialect tokenize = TokenizeDialect::kOff;
  uint32_t tokenize_verify_every = 100;
  std::shared_ptr<TokenizeMirror> tokenize_mirror;  // what was learned (kept in RuleStats)
};

struct VipConfig {
  std::vector<std::shared_ptr<const Route>> routes;
  bool has_model_pools = false;  // any route with a non-empty model_name
  // Credentials (governance): any route that checks them (api_key_auth required, jwt,
  // apikey-or-jwt); any that takes API keys; the JWT profiles its routes name.
  bool checks_credentials = false;
  bool takes_keys = false;
  std::vector<std::string> jwt_profiles;
  uint32_t body_needs =
      0;  // union of the routes' body FactNeeds (parsed before the route is known)
  // TLS terminated here (a route with security 1): new connections handshake with this
  // certificate first; null: plain TCP.
  std::shared_ptr<http::TlsFiles> tls;

  // The route for (host without port, path, model); nullptr when none. `host_path_matched`
  // tells "no rule for this host/path" (404) from "no pool for this model" (503).
  const Route* find(std::string_view host, std::string_view path, std::string_view model,
                    bool& host_path_matched) const;
  // Model names of the named pools reachable for this host/path (for GET /v1/models).
  std::vector<std::string> models(std::string_view host, std::string_view path) const;
};

std::string_view hostWithoutPort(std::string_view host);

}  // namespace kvgate::proxy
