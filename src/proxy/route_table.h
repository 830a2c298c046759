// The data plane's immutable view of the rules on one VIP:port, published as a snapshot.
//
// The control thread builds a new VipConfig on every change and publishes it atomically; a
// request keeps the snapshot it started with (shared_ptr), so updates never disturb it.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/rule.h"
#include "http/asio.h"
#include "proxy/rule_stats.h"
#include "routing/selectors/selector.h"

namespace kvgate::proxy {

struct Route {
  config::RuleSpec rule;
  std::vector<routing::PoolEndpoint> endpoints;
  std::vector<tcp::endpoint> addresses;         // one per endpoint, same order
  std::unique_ptr<routing::Selector> selector;  // null when the rule's selector is inactive
  bool needs_body_keys = false;              // sel 8, 9, 10 read the prefix key / conversation id
  std::shared_ptr<RuleStats> stats;          // survives snapshots (kept by rule key)
  std::vector<StatusCounters*> ep_counters;  // stats per endpoint, same order as endpoints
};

struct VipConfig {
  std::vector<std::shared_ptr<const Route>> routes;
  bool has_model_pools = false;  // any route with a non-empty model_name
  bool has_key_routes = false;   // any route whose selector reads the body keys (sel 8, 9, 10)

  // The route for (host without port, path, model); nullptr when none. `host_path_matched`
  // tells "no rule for this host/path" (404) from "no pool for this model" (503).
  const Route* find(std::string_view host, std::string_view path, std::string_view model,
                    bool& host_path_matched) const;
  // Model names of the named pools reachable for this host/path (for GET /v1/models).
  std::vector<std::string> models(std::string_view host, std::string_view path) const;
};

std::string_view hostWithoutPort(std::string_view host);

}  // namespace kvgate::proxy
