#include "proxy/data_plane.h"

#include <set>

#include "common/log.h"
#include "proxy/prober.h"
#include "proxy/worker.h"

namespace kvgate::proxy {

DataPlane::DataPlane(ProxyOptions opts) : opts_(opts) {
  int n = opts_.workers > 0 ? opts_.workers : static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  opts_.workers = n;
  for (int i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>(opts_, stats_));
  prober_ = std::make_unique<Prober>(workers_[0]->io, opts_.probe_interval);
}

DataPlane::~DataPlane() { stop(); }

void DataPlane::start() {
  if (started_) return;
  started_ = true;
  for (auto& w : workers_) {
    Worker* wp = w.get();
    w->thread = std::thread([wp] { wp->io.run(); });
  }
}

void DataPlane::stop() {
  if (!started_) return;
  started_ = false;
  for (auto& [k, l] : listeners_)
    for (size_t i = 0; i < l->acceptors.size(); ++i) {
      auto acc = l->acceptors[i];
      asio::post(workers_[i]->io, [acc] {
        error_code ec;
        acc->close(ec);
      });
    }
  listeners_.clear();
  asio::post(workers_[0]->io, [p = prober_.get()] { p->stop(); });
  for (auto& w : workers_) {
    w->work.reset();
    w->io.stop();
  }
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
}

std::shared_ptr<endpoints::EndpointState> DataPlane::endpointState(const std::string& ip,
                                                                   uint16_t port) {
  std::string k = ip + "|" + std::to_string(port);
  auto& slot = endpoint_states_[k];
  if (!slot) slot = std::make_shared<endpoints::EndpointState>(ip, port);
  return slot;
}

Result<void> DataPlane::apply(const std::vector<config::RuleSpec>& rules) {
  // 1. Build the new snapshots.
  std::map<std::string, std::shared_ptr<VipConfig>> configs;
  std::map<std::string, tcp::endpoint> binds;
  for (const auto& rule : rules) {
    auto route = std::make_shared<Route>();
    route->rule = rule;
    for (const auto& e : rule.endpoints) {
      routing::PoolEndpoint pe;
      pe.state = endpointState(e.ip, e.port);
      pe.weight = e.weight;
      pe.role = e.role;
      route->endpoints.push_back(pe);
      route->addresses.emplace_back(asio::ip::make_address(e.ip), e.port);
    }
    route->selector = routing::Selector::create(rule.sel, route->endpoints);
    route->needs_body_keys = rule.sel == 8 || rule.sel == 9 || rule.sel == 10;
    auto& stats = rule_stats_[rule.key()];
    if (!stats) stats = std::make_shared<RuleStats>();
    stats->rule = rule.name.empty() ? rule.key() : rule.name;
    stats->model = rule.model_name;
    stats->selector = config::selectorName(rule.sel);
    for (const auto& e : route->endpoints) {
      auto& c = stats->per_endpoint[e.state->label];
      if (!c) c = std::make_unique<StatusCounters>();
      route->ep_counters.push_back(c.get());
    }
    route->stats = stats;
    auto& cfg = configs[rule.listenKey()];
    if (!cfg) cfg = std::make_shared<VipConfig>();
    cfg->has_model_pools |= !rule.model_name.empty();
    cfg->has_key_routes |= route->needs_body_keys;
    cfg->routes.push_back(std::move(route));
    binds[rule.listenKey()] = tcp::endpoint(asio::ip::make_address(rule.vip), rule.port);
  }
  // 2. Bind listeners for new VIP:ports; on failure close what was opened and change nothing.
  std::vector<std::shared_ptr<Listener>> opened;
  for (auto& [key, ep] : binds) {
    if (listeners_.count(key)) continue;
    auto l = std::make_shared<Listener>();
    l->key = key;
    l->endpoint = ep;
    for (auto& w : workers_) {
      auto acc = std::make_shared<tcp::acceptor>(w->io);
      error_code ec;
      acc->open(ep.protocol(), ec);
      if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
      if (!ec) {
        int one = 1;
        if (::setsockopt(acc->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0)
          ec = error_code(errno, boost::system::system_category());
      }
      if (!ec) acc->bind(ep, ec);
      if (!ec) acc->listen(4096, ec);
      if (ec) {
        for (auto& o : opened)
          for (auto& a : o->acceptors) a->close(ec);
        for (auto& a : l->acceptors) a->close(ec);
        return fail(503, "listen",
                    "cannot listen on " + key + ": " + ec.message() +
                        " (is the address local and the port free?)");
      }
      l->acceptors.push_back(acc);
    }
    opened.push_back(l);
  }
  // 3. Publish: new snapshots for every VIP:port, start new listeners, close removed ones.
  for (auto& l : opened) listeners_[l->key] = l;
  for (auto& [key, l] : listeners_) {
    auto it = configs.find(key);
    if (it != configs.end()) l->config.store(std::shared_ptr<const VipConfig>(it->second));
  }
  for (auto& l : opened)
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = *workers_[i];
      asio::co_spawn(w.io, acceptLoop(w, l, l->acceptors[i]), asio::detached);
      log::info("proxy", "listening on " + l->key + " (worker " + std::to_string(i) + ")");
    }
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (configs.count(it->first)) {
      ++it;
      continue;
    }
    auto l = it->second;
    l->closed.store(true);
    for (size_t i = 0; i < l->acceptors.size(); ++i) {
      auto acc = l->acceptors[i];
      asio::post(workers_[i]->io, [acc] {
        error_code ec;
        acc->close(ec);
      });
    }
    log::info("proxy", "stopped listening on " + l->key);
    it = listeners_.erase(it);
  }
  // Forget the stats of deleted rules and the endpoint states no snapshot refers to any more.
  std::set<std::string> live_keys;
  for (const auto& rule : rules) live_keys.insert(rule.key());
  for (auto it = rule_stats_.begin(); it != rule_stats_.end();)
    it = live_keys.count(it->first) ? std::next(it) : rule_stats_.erase(it);
  rule_count_ = rules.size();
  // Active probes for the new rule set (run on worker 0; the update is posted there).
  std::vector<std::shared_ptr<endpoints::EndpointState>> states;
  for (auto& [k, st] : endpoint_states_) states.push_back(st);
  auto specs =
      std::make_shared<std::vector<ProbeSpec>>(probeSpecs(rules, states, opts_.probe_timeout));
  asio::post(workers_[0]->io, [p = prober_.get(), specs] { p->update(std::move(*specs)); });
  for (auto it = endpoint_states_.begin(); it != endpoint_states_.end();)
    it = it->second.use_count() == 1 ? endpoint_states_.erase(it) : std::next(it);
  return {};
}

}  // namespace kvgate::proxy
