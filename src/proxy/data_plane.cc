#include "proxy/data_plane.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "common/log.h"
#include "kv/kv_index.h"
#include "l4/l4_plane.h"
#include "proxy/client_conn.h"
#include "proxy/filters/request_filter.h"
#include "proxy/listener_tls.h"
#include "proxy/load_scraper.h"
#include "proxy/overload.h"
#include "proxy/prober.h"
#include "proxy/remote_hint.h"
#include "proxy/worker.h"
#include "routing/rule_profile.h"
#include "routing/stage_registry.h"
#include "routing/stages/pd_ladder.h"
#include "sockmap/sockmap_relay.h"

namespace kvgate::proxy {
namespace {

const common::Clock& clockOf(const ProxyOptions& o) {
  return o.clock ? *o.clock : common::SteadyClock::instance();
}

using routing::stageNames;

// The stage that always picks (the ladder's Tier 2): a P/D rule's decode and rescue picks, and a
// single-leg rule's pooling requests.
std::string leastLoad() { return std::string(routing::stageForTier(routing::Ladder::kTier2).name); }

std::unique_ptr<routing::Pipeline> buildPipeline(
    const Route& route, const common::Clock& clock, const kv::KvIndex* kv_index,
    const kv::WorkerLookup* kv_lookup, const routing::PromptTokens* tokens,
    kv::SpeculativeOverlay* overlay, const std::vector<std::string>& names,
    const std::shared_ptr<routing::PipelineStats>& stats, const routing::RoutingEnv* env) {
  if (names.empty()) return nullptr;
  routing::StageServices services{clock,     route.rule, route.endpoints, kv_index,
                                  kv_lookup, tokens,     overlay};
  services.sessions = route.sessions.get();
  services.trie = route.trie.get();
  services.env = env;
  auto p = routing::Pipeline::build(names, services, stats);
  if (!p) {
    log::error("proxy", "rule " + route.rule.key() + ": " + p.error().what);
    return nullptr;
  }
  return std::move(*p);
}

}  // namespace

DataPlane::DataPlane(ProxyOptions opts) : opts_(opts), endpoints_(clockOf(opts)) {
  int n = opts_.workers > 0 ? opts_.workers : static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  opts_.workers = n;
  for (int i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>(opts_, stats_, gov_));
  prober_ = std::make_unique<Prober>(workers_[0]->io, opts_.probe_interval);
  scraper_ = std::make_unique<LoadScraper>(workers_[0]->io, opts_.scrape_interval);
  listener_tls_ = std::make_unique<ListenerTls>(opts_.tls, opts_.http2);
}

DataPlane::~DataPlane() { stop(); }

void DataPlane::refreshTls() { listener_tls_->refresh(); }

std::shared_ptr<http::TlsFiles> DataPlane::backendTlsFor(const config::RuleSpec& rule) const {
  return listener_tls_->backendFor(rule);
}

void DataPlane::setWorkerTokens(const routing::PromptTokens* tokens) {
  for (auto& w : workers_) w->prompt_tokens = tokens;
}

void DataPlane::setTokenizers(const tok::RequestTokenizer* t) {
  for (auto& w : workers_) w->tokenizers = t;
}

void DataPlane::start() {
  if (started_) return;
  started_ = true;
  OverloadLimits lim;
  lim.limit = opts_.max_heap_bytes;
  lim.budget = opts_.heap_budget_bytes;
  OverloadMonitor::Probes probes;
  probes.exempt = [this] { return kv_index_ ? static_cast<uint64_t>(kv_index_->bytes()) : 0; };
  probes.idle = [this] { return stats_.active_connections.load() == 0; };
  overload_ = std::make_unique<OverloadMonitor>(lim, stats_.overload, std::chrono::milliseconds(250),
                                                std::move(probes));
  overload_->start();
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker* wp = workers_[i].get();
    asio::co_spawn(wp->io, poolSweeper(*wp), asio::detached);
    asio::co_spawn(wp->io, loopLagProbe(*wp, i), asio::detached);
    wp->thread = std::thread([wp] { wp->io.run(); });
    // (top, perf and ps -L show it; 15 characters at most)
    const std::string name = "kvgate-w" + std::to_string(i);
    ::pthread_setname_np(wp->thread.native_handle(), name.substr(0, 15).c_str());
  }
}

void DataPlane::drain() {
  stats_.draining.store(true);
  for (auto& [k, l] : listeners_) {
    for (size_t i = 0; i < l->acceptors.size(); ++i)
      asio::post(workers_[i]->io, [acc = l->acceptors[i]] {
        error_code ec;
        acc->close(ec);
      });
  }
  for (auto& w : workers_) asio::post(w->io, [wp = w.get()] { drainWorker(*wp); });
  log::info("proxy", "draining: no new connections; " +
                         std::to_string(stats_.active_connections.load()) +
                         " client connection(s) open");
}

void DataPlane::stop() {
  if (!started_) return;
  started_ = false;
  if (overload_) overload_->stop();
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
  if (l4_prober_) asio::post(workers_[0]->io, [p = l4_prober_.get()] { p->stop(); });
  asio::post(workers_[0]->io, [p = scraper_.get()] { p->stop(); });
  // gRPC callbacks of remote index calls post into the workers' loops: let them land first
  // (each call has a deadline of at most 1 s; the wait is bounded anyway).
  for (int i = 0; i < 300 && remoteCallsInFlight() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (auto& w : workers_) {
    w->work.reset();
    w->io.stop();
  }
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
}

// One rule's snapshot: its pool (endpoints from the table, stable ids), its counters (kept by
// rule key across snapshots; endpoints that left the rule are dropped) and its pipeline.
std::shared_ptr<Route> DataPlane::buildRoute(const config::RuleSpec& rule,
                                             const common::Clock& clock,
                                             std::set<std::string>& live_endpoints) {
  auto route = std::make_shared<Route>();
  route->rule = rule;
  route->health = opts_.health;
  route->backend =
      backendProtocolOf(rule.service_args.value("backend_protocol", std::string("http1")));
  if (rule.service_args.value("pd_disagg_mode", false)) {  // seed 000: P/D breaker defaults
    route->health.cb_failures = 3;  // (the open window is the data plane's, default 30 s)
  }
  for (const auto& e : rule.endpoints) {
    routing::PoolEndpoint pe;
    pe.state = endpoints_.acquire(e.ip, e.port);
    pe.weight = e.weight;
    pe.role = e.role;
    route->endpoints.push_back(pe);
    route->addresses.emplace_back(asio::ip::make_address(e.ip), e.port);
    const std::string domain = e.json.value("domainName", "");
    route->tls_names.push_back(domain.empty() ? e.ip : domain);
    live_endpoints.insert(endpoints::EndpointTable::key(e.ip, e.port));
  }
  auto& stats = rule_stats_[rule.key()];
  if (!stats) stats = std::make_shared<RuleStats>();
  const std::vector<std::string> stage_names = stageNames(rule);
  std::string stages;
  for (const auto& n : stage_names) stages += n + ",";
  if (stats->stages != stages)  // other stages: counts start over
    stats->pipeline = std::make_shared<routing::PipelineStats>();
  stats->stages = stages;
  stats->routing_knobs.clear();
  const nlohmann::json effective = routing::effectiveRouting(rule, routingEnv());
  for (auto& [k, v] : effective.items())
    if (k != "stages" && k != "candidateFilters" && k != "stagesFrom")
      stats->routing_knobs.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
  stats->rule = rule.name.empty() ? rule.key() : rule.name;
  stats->model = rule.model_name;
  stats->selector = config::selectorName(rule.sel);
  std::map<std::string, std::shared_ptr<StatusCounters>> counters;
  for (const auto& e : route->endpoints) {
    auto& c = stats->per_endpoint[e.state->label];
    if (!c) c = std::make_shared<StatusCounters>();
    counters[e.state->label] = c;
    route->ep_counters.push_back(c);
  }
  stats->per_endpoint = std::move(counters);
  route->stats = stats;
  // Tier 0 and Tier 1 tables, for a P/D ladder that has those stages (only P/D ladders do; a
  // table the ladder no longer has is freed: no pins written that nothing reads).
  auto listed = [&](routing::Ladder tier) {
    return std::find(stage_names.begin(), stage_names.end(),
                     routing::stageForTier(tier).name) != stage_names.end();
  };
  if (!listed(routing::Ladder::kTier0))
    stats->sessions.reset();
  else if (!stats->sessions)
    stats->sessions = std::make_shared<routing::SessionTable>(routingEnv().session_max);
  if (!listed(routing::Ladder::kTier1))
    stats->trie.reset();
  else if (!stats->trie)
    stats->trie = std::make_shared<routing::PrefixTrie>(routingEnv().trie_max_nodes);
  route->sessions = stats->sessions;
  route->trie = stats->trie;
  route->pipeline = buildPipeline(*route, clock, kv_index_, kv_lookup_, prompt_tokens_, kv_overlay_,
                                  stage_names, stats->pipeline, routing_env_);
  route->needs = route->pipeline ? route->pipeline->needs() : 0;
  route->eligibility = routing::Eligibility(rule);
  stats->candidate_filters = route->eligibility.names();
  route->kv_block_tokens = static_cast<uint32_t>(rule.service_args.value("kvBlockSize", 16));
  route->filters = requestFilters(rule);
  if (rule.service_args.value("pd_disagg_mode", false)) {
    buildPd(*route, clock);
    stats->tokenize_mirror.reset();  // (P/D rules forward tokenize calls: nothing learned holds)
    stats->tokenize_sig.clear();
  } else {
    // Single-leg rules: the Responses API's response homes, and the pooling requests' pipeline.
    if (!response_owners_) response_owners_ = std::make_shared<ResponseHomes>();
    if (!stats->response_homes)
      stats->response_homes = std::make_shared<ResponseHomes>(response_owners_);
    // /tokenize and /detokenize answered by the gateway (tokenize_local.h): the engines whose
    // answers it computes, unless kvTokenizeLocal is off.
    const std::string engine = rule.service_args.value("kvEngineType", std::string("vllm"));
    if (rule.service_args.value("kvTokenizeLocal", std::string("verified")) != "off")
      route->tokenize = engine == "vllm"     ? TokenizeDialect::kVllm
                        : engine == "sglang" ? TokenizeDialect::kSglang
                                             : TokenizeDialect::kOff;
    route->tokenize_verify_every =
        static_cast<uint32_t>(rule.service_args.value("kvTokenizeVerifyEvery", 100));
    // What was learned holds for these engines and settings: a change starts afresh.
    std::string sig = engine + '|' + std::to_string(static_cast<int>(route->tokenize)) + '|' +
                      std::to_string(route->tokenize_verify_every) + '|' + rule.model_name;
    for (const auto& a : route->addresses)
      sig += '|' + a.address().to_string() + ':' + std::to_string(a.port());
    if (!stats->tokenize_mirror || stats->tokenize_sig != sig) {
      stats->tokenize_mirror = std::make_shared<TokenizeMirror>();
      stats->tokenize_sig = std::move(sig);
    }
    route->tokenize_mirror = stats->tokenize_mirror;
    // kvPoolingLb auto (the default): least loaded where the rule's selector spreads requests
    // anyway (rr, lc); a selector that keys them (hash, persist, chwbl, ...) keeps its affinity.
    const std::string pooling = rule.service_args.value("kvPoolingLb", std::string("auto"));
    if (pooling == "least_loaded" || (pooling == "auto" && (rule.sel == 0 || rule.sel == 4))) {
      if (!stats->pooling_pipeline)
        stats->pooling_pipeline = std::make_shared<routing::PipelineStats>();
      route->pooling_pipeline = buildPipeline(*route, clock, nullptr, nullptr, nullptr, nullptr,
                                              {leastLoad()}, stats->pooling_pipeline, routing_env_);
    }
  }
  return route;
}

// A P/D rule's dialect, decode and rescue pipelines and its endpoints' transfer addresses.
void DataPlane::buildPd(Route& route, const common::Clock& clock) {
  const auto& sa = route.rule.service_args;
  route.pd_dialect = engines::pd::dialectFromName(sa.value("kvEngineType", std::string("vllm")));
  auto& st = *route.stats;
  if (!st.decode_pipeline) st.decode_pipeline = std::make_shared<routing::PipelineStats>();
  route.decode_pipeline = buildPipeline(route, clock, nullptr, nullptr, nullptr, nullptr,
                                        {leastLoad()}, st.decode_pipeline, routing_env_);
  bool plain = false;
  for (const auto& e : route.endpoints) plain |= e.role == 0;
  if (plain) {
    if (!st.rescue_pipeline) st.rescue_pipeline = std::make_shared<routing::PipelineStats>();
    route.rescue_pipeline = buildPipeline(route, clock, nullptr, nullptr, nullptr, nullptr,
                                          {leastLoad()}, st.rescue_pipeline, routing_env_);
  }
  for (const auto& e : route.rule.endpoints) {
    const int nixl = e.json.value("nixl_port", 0);
    const std::string port = std::to_string(nixl > 0 ? nixl : e.port);
    route.transfer_addr.push_back(e.ip.find(':') != std::string::npos ? "[" + e.ip + "]:" + port
                                                                      : e.ip + ":" + port);
  }
  const int bootstrap = sa.value("pdBootstrapPort", 0);
  route.bootstrap_port = static_cast<uint16_t>(bootstrap > 0 ? bootstrap : 8998);
  route.admission = config::admissionConfig(route.rule, routingEnv().admission);
  st.admission_limit = route.admission.on() ? route.admission.prefill_max : -1;
  // The legs rewrite the body: it is parsed (a JSON object) for every P/D request.
  route.needs |= routing::kNeedRequestShape;
  if (!route.pd_dialect || !route.decode_pipeline) route.pipeline.reset();  // 503: logged above
}

std::vector<std::string> DataPlane::setController(const std::vector<ControllerUpdate>& updates,
                                                  int64_t interval_ns) {
  const int64_t now = clockOf(opts_).nowNs();
  std::vector<std::string> unknown;
  for (const auto& u : updates) {
    auto it = endpoints_.all().find(endpoints::EndpointTable::key(u.ip, u.port));
    if (it == endpoints_.all().end()) {
      unknown.push_back(u.ip + ":" + std::to_string(u.port));
      continue;
    }
    auto& s = *it->second;
    s.ctl_state.store(static_cast<int>(u.state));
    // At least 1/1000: a tiny positive weight must not round to zero capacity.
    s.ctl_weight_milli.store(std::max<int64_t>(1, static_cast<int64_t>(u.weight * 1000.0 + 0.5)));
    s.ctl_updated_ns.store(now);
    s.ctl_interval_ns.store(interval_ns);
  }
  return unknown;
}

void DataPlane::clearController() {
  for (auto& [key, s] : endpoints_.all()) {
    s->ctl_interval_ns.store(0);
    s->ctl_state.store(0);
    s->ctl_weight_milli.store(1000);
  }
}

std::string DataPlane::controllerJson() const {
  const int64_t now = clockOf(opts_).nowNs();
  nlohmann::json eps = nlohmann::json::array();
  for (auto& [key, s] : endpoints_.all()) {
    const int64_t interval = s->ctl_interval_ns.load();
    if (interval == 0) continue;
    const auto v = s->controller(now);
    eps.push_back({{"endpointIP", s->ip},
                   {"targetPort", s->port},
                   {"state", endpoints::controllerStateName(
                                 static_cast<endpoints::ControllerState>(s->ctl_state.load()))},
                   {"weight", static_cast<double>(s->ctl_weight_milli.load()) / 1000.0},
                   {"interval_sec", static_cast<double>(interval) / 1e9},
                   {"age_ms", (now - s->ctl_updated_ns.load()) / 1'000'000},
                   {"effective_state", endpoints::controllerStateName(v.state)},
                   {"effective_weight", v.weight},
                   {"stale", v.stale}});
  }
  return nlohmann::json{{"endpoints", eps}}.dump();
}

// Mode 4 rules go to the fullproxy (applyProxy), mode 0-3 and 5 rules to the L4 path
// (l4/l4_plane.h); all or nothing: when the fullproxy refuses, the L4 path gets its last set back.
Result<void> DataPlane::apply(const std::vector<config::RuleSpec>& rules) {
  if (stats_.draining.load())
    return fail(503, "draining", "the gateway is shutting down; rule changes are refused", true);
  bool any_l4 = false;
  for (const auto& r : rules) any_l4 |= r.mode != 4;
  if (!any_l4 && !l4_) return applyProxy(rules);
  if (!l4_)
    return fail(
        400, "serviceArguments.mode",
        "mode 0-3 and 5 rules (DNAT, one-arm, full NAT, DSR, host one-arm) need the L4 data "
        "path: start "
        "serve with --l4-ifaces IFACE[,IFACE...] (docs/l4.md)");
  std::vector<config::RuleSpec> proxy, l4;
  std::set<std::string> tcp_l4;  // VIP:port of the L4 path's tcp rules
  for (const auto& r : rules) {
    (r.mode == 4 ? proxy : l4).push_back(r);
    if (config::isL4Mode(r.mode) && r.protocol == "tcp") tcp_l4.insert(r.listenKey());
  }
  // The L4 path rewrites packets before the fullproxy's socket would see them: one of the two
  // would silently get nothing.
  std::set<uint16_t> host_l4;  // ports of mode 5 tcp rules: served on every address of the node
  for (const auto& r : l4)
    if (r.mode == 5 && r.protocol == "tcp" && r.admin_up) host_l4.insert(r.port);
  for (const auto& r : proxy)  // (loopback VIPs are not on the L4 interfaces)
    if (host_l4.count(r.port) && r.vip.rfind("127.", 0) != 0)
      return fail(400, "serviceArguments.port",
                  "tcp port " + std::to_string(r.port) +
                      " is a mode 5 (host one-arm) rule's, served on every address of this node; "
                      "a mode 4 rule cannot share it");
  for (const auto& r : proxy)
    if (tcp_l4.count(r.listenKey()))
      return fail(400, "serviceArguments.mode",
                  r.listenKey() +
                      "/tcp is an L4 (mode 0-3, 5) rule's already; a mode 4 rule cannot share it");
  if (auto a = l4_->apply(l4); !a) return a;
  auto p = applyProxy(proxy);
  if (!p) {
    l4_->rollback();  // (the same slots: the flows of the services it touched live on)
    return p;
  }
  updateL4Probes(l4);
  return p;
}

// One health state per endpoint of each L4 (mode 0-3, 5) rule (its own, apart from mode 4's table
// and from other rules': each rule's probe settings judge its endpoints), probed as the rule says;
// an endpoint its rule does not probe counts as up. The probe tasks are replaced only when what
// they probe changed (a replaced task starts its failure count over).
void DataPlane::updateL4Probes(const std::vector<config::RuleSpec>& l4_rules) {
  if (!l4_prober_) l4_prober_ = std::make_unique<Prober>(workers_[0]->io, opts_.probe_interval);
  std::map<std::string, std::shared_ptr<endpoints::EndpointState>> next;
  auto specs = std::make_shared<std::vector<ProbeSpec>>();
  l4_breaker_rules_.clear();
  for (const auto& r : l4_rules) {
    if (!r.admin_up) continue;  // (not installed: not probed)
    if (r.cb_enable) l4_breaker_rules_.insert(r.key());
    std::vector<std::shared_ptr<endpoints::EndpointState>> states;
    for (const auto& e : r.endpoints) {
      const std::string key = r.key() + "|" + e.ip + "|" + std::to_string(e.port);
      auto it = l4_health_.find(key);
      auto st = it != l4_health_.end() ? it->second
                                       : std::make_shared<endpoints::EndpointState>(
                                             static_cast<endpoints::EndpointId>(next.size()), e.ip,
                                             e.port, clockOf(opts_));
      next[key] = st;
      states.push_back(st);
    }
    for (auto& sp : probeSpecs({r}, states, opts_.probe_timeout,
                               [&](const config::RuleSpec& x) -> std::shared_ptr<http::TlsFiles> {
                                 return x.service_args.value("probetype", "") == "https"
                                            ? listener_tls_->probe()
                                            : nullptr;
                               }))
      specs->push_back(std::move(sp));
  }
  std::string sig;  // what the tasks probe: unchanged, they are left running
  for (const auto& sp : *specs) {
    sig += std::to_string(reinterpret_cast<uintptr_t>(sp.ep.get())) + "|" + (sp.http ? "h" : "t") +
           std::to_string(sp.port) + sp.method + " " + sp.path + "|" +
           std::to_string(sp.timeout.count()) + "|" + std::to_string(sp.retries) + "|" +
           std::to_string(reinterpret_cast<uintptr_t>(sp.tls.get())) + "|" + sp.tls_name;
    for (auto [lo, hi] : sp.expected) sig += "," + std::to_string(lo) + "-" + std::to_string(hi);
    sig += ";";
  }
  if (sig != l4_probe_sig_) {
    asio::post(workers_[0]->io, [p = l4_prober_.get(), specs] { p->update(std::move(*specs)); });
    l4_probe_sig_ = std::move(sig);
  }
  l4_health_ = std::move(next);
}

std::vector<std::string> DataPlane::syncL4Health() {
  if (!l4_) return {};
  // The connects the program saw since the last second, as mode 4's requests feed health: a
  // second in which the endpoint answered any counts as one success (it resets the failure
  // streaks and closes a half-open breaker), otherwise each refused or unanswered connect is a
  // connect failure.
  for (const auto& o : l4_->connectOutcomes()) {
    auto it = l4_health_.find(o.rule + "|" + o.ip + "|" + std::to_string(o.port));
    if (it == l4_health_.end()) continue;
    const bool breaker = l4_breaker_rules_.count(o.rule) > 0;
    auto& h = it->second->health;
    // (while open the endpoint gets no new flow: what comes is the outcome of connects made
    // before it opened, which must not close it)
    if (breaker && h.breaker() == endpoints::BreakerState::kOpen) continue;
    if (o.answered > 0) {
      h.onResponse(opts_.health, breaker, 200, false);
      continue;
    }
    const uint64_t failures = std::min<uint64_t>(o.refused + o.unanswered, 64);
    for (uint64_t i = 0; i < failures; ++i) h.onConnectFailure(opts_.health, breaker);
  }
  auto changed =
      l4_->syncHealth([this](const std::string& rule, const std::string& ip, uint16_t port) {
        auto it = l4_health_.find(rule + "|" + ip + "|" + std::to_string(port));
        if (it == l4_health_.end()) return true;
        auto& h = it->second->health;
        if (l4_breaker_rules_.count(rule)) {
          const auto s = h.breaker();
          if (s == endpoints::BreakerState::kOpen) return false;
          // Half-open: new flows go there again, and the first connect's outcome above closes
          // or reopens it (admits() marks the trial taken).
          bool trial = false;
          if (s == endpoints::BreakerState::kHalfOpen && h.up()) (void)h.admits(true, trial);
        }
        return h.up();
      });
  l4_->syncFlows();
  return changed;
}

Result<void> DataPlane::applyProxy(const std::vector<config::RuleSpec>& rules) {
  // The sockmap relay is loaded here, on the control thread, the first time a rule asks for it
  // (a kernel that refuses: logged once, the rules relayed in userspace).
  for (const auto& rule : rules)
    if (rule.sockmap >= 2) {
      sockmap::Relay::warm();
      break;
    }
  // TLS listeners: one set of TLS fields each, its context loaded (proxy/listener_tls.h).
  auto tls_plan = listener_tls_->plan(rules);
  if (!tls_plan) return tl::unexpected(tls_plan.error());
  // 1. Bind listeners for new VIP:ports first; on failure close what was opened and change
  // nothing (no snapshot, endpoint or counter is touched before this succeeds).
  std::map<std::string, tcp::endpoint> binds;
  for (const auto& rule : rules)
    binds[rule.listenKey()] = tcp::endpoint(asio::ip::make_address(rule.vip), rule.port);
  std::vector<std::shared_ptr<Listener>> opened;
  for (auto& [key, ep] : binds) {
    if (listeners_.count(key)) continue;
    auto l = bindListener(key, ep);
    if (!l) {
      for (auto& o : opened) closeAcceptors(o->acceptors);
      return tl::unexpected(l.error());
    }
    opened.push_back(*l);
  }
  // 2. Build the new snapshots.
  const common::Clock& clock = clockOf(opts_);
  std::map<std::string, std::shared_ptr<VipConfig>> configs;
  std::set<std::string> live_endpoints;
  for (const auto& rule : rules) {
    auto route = buildRoute(rule, clock, live_endpoints);
    auto& cfg = configs[rule.listenKey()];
    if (!cfg) cfg = std::make_shared<VipConfig>();
    cfg->has_model_pools |= !rule.model_name.empty();
    const std::string& auth = rule.api_key_auth;
    cfg->checks_credentials |= auth == "required" || auth == "jwt" || auth == "apikey-or-jwt";
    cfg->takes_keys |= auth == "required" || auth == "apikey-or-jwt";
    if ((auth == "jwt" || auth == "apikey-or-jwt") &&
        std::find(cfg->jwt_profiles.begin(), cfg->jwt_profiles.end(), rule.jwt_profile) ==
            cfg->jwt_profiles.end())
      cfg->jwt_profiles.push_back(rule.jwt_profile);
    cfg->body_needs |= route->needs & routing::kBodyNeeds;
    if (auto t = tls_plan->listeners.find(rule.listenKey()); t != tls_plan->listeners.end())
      cfg->tls = t->second;
    route->backend_tls = tls_plan->backendFor(rule);
    cfg->routes.push_back(std::move(route));
  }
  // 3. Publish: new snapshots for every VIP:port, start new listeners, close removed ones.
  listener_tls_->commit(*tls_plan);
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
    closeListener(*it->second);
    it = listeners_.erase(it);
  }
  // 4. Forget deleted rules' stats and removed endpoints (metrics, prober, pools; a re-added
  // endpoint starts fresh). In-flight requests keep what they hold until they finish.
  std::set<std::string> live_keys;
  for (const auto& rule : rules) live_keys.insert(rule.key());
  for (auto it = rule_stats_.begin(); it != rule_stats_.end();)
    it = live_keys.count(it->first) ? std::next(it) : rule_stats_.erase(it);
  rule_count_ = rules.size();
  auto dropped = endpoints_.retainOnly(live_endpoints);
  if (!dropped.empty())
    for (auto& w : workers_) asio::post(w->io, [wp = w.get(), dropped] { wp->pool.drop(dropped); });
  std::vector<std::shared_ptr<endpoints::EndpointState>> states;
  for (auto& [k, st] : endpoints_.all()) states.push_back(st);
  auto specs =
      std::make_shared<std::vector<ProbeSpec>>(probeSpecs(rules, states, opts_.probe_timeout,
                 [&](const config::RuleSpec& r) -> std::shared_ptr<http::TlsFiles> {
                   if (auto b = tls_plan->backendFor(r)) return b;
                   return r.service_args.value("probetype", "") == "https" ? listener_tls_->probe()
                                                                            : nullptr;
                 }));
  asio::post(workers_[0]->io, [p = prober_.get(), specs] { p->update(std::move(*specs)); });
  auto scrapes = std::make_shared<std::vector<ScrapeSpec>>(
      scrapeSpecs(rules, states, [&](const config::RuleSpec& r) { return tls_plan->backendFor(r); }));
  asio::post(workers_[0]->io, [p = scraper_.get(), scrapes] { p->update(std::move(*scrapes)); });
  return {};
}

Result<std::shared_ptr<Listener>> DataPlane::bindListener(const std::string& key,
                                                          const tcp::endpoint& ep) {
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
      error_code close_ec;
      acc->close(close_ec);  // not listening: no event for it can be pending
      closeAcceptors(l->acceptors);
      return fail(503, "listen",
                  "cannot listen on " + key + ": " + ec.message() +
                      " (is the address local and the port free?)");
    }
    l->acceptors.push_back(acc);
  }
  return l;
}

// Acceptor i belongs to worker i; a listening acceptor may have an event pending in its worker's
// reactor, which runs without per-socket locks (worker.h): only that worker may close it.
void DataPlane::closeAcceptors(const std::vector<std::shared_ptr<tcp::acceptor>>& accs) {
  for (size_t i = 0; i < accs.size(); ++i) {
    asio::post(workers_[i]->io, [acc = accs[i]] {
      error_code ec;
      acc->close(ec);
    });
  }
}

void DataPlane::closeListener(Listener& l) {
  l.closed.store(true);
  closeAcceptors(l.acceptors);
  log::info("proxy", "stopped listening on " + l.key);
}

}  // namespace kvgate::proxy
