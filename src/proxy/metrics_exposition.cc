// DataPlane::renderMetrics: walks the rule stats, listeners and endpoint states (control thread)
// and writes every family of metrics/families.h, in that list's order.
#include <algorithm>

#include "common/log.h"
#include "kv/speculative.h"
#include "l4/l4_plane.h"
#include "metrics/text.h"
#include "proxy/data_plane.h"
#include "proxy/listener_tls.h"
#include "proxy/worker.h"
#include "sockmap/sockmap_relay.h"
#include "telemetry/tracer.h"

namespace kvgate::proxy {

// Requests by rule/endpoint/status, unrouted answers, latency histograms.
void DataPlane::renderRequestMetrics(metrics::TextWriter& w) const {
  using namespace metrics;
  w.header(kRequests);
  for (auto& [key, st] : rule_stats_) {
    for (auto& [ep, c] : st->per_endpoint)
      for (int s = 0; s < 600; ++s)
        if (uint64_t v = c->by_status[static_cast<size_t>(s)].load())
          w.sample(kRequests,
                   {{"rule", st->rule},
                    {"model", st->model},
                    {"endpoint", ep},
                    {"status", std::to_string(s)}},
                   static_cast<double>(v));
    for (int s = 0; s < 600; ++s)
      if (uint64_t v = st->no_endpoint.by_status[static_cast<size_t>(s)].load())
        w.sample(kRequests,
                 {{"rule", st->rule},
                  {"model", st->model},
                  {"endpoint", ""},
                  {"status", std::to_string(s)}},
                 static_cast<double>(v));
  }
  w.header(kUnrouted);
  for (auto& [key, l] : listeners_)
    for (int s = 0; s < 600; ++s)
      if (uint64_t v = l->unrouted.by_status[static_cast<size_t>(s)].load())
        w.sample(kUnrouted, {{"listener", key}, {"status", std::to_string(s)}},
                 static_cast<double>(v));
  w.header(kUpstreamLatency);
  for (auto& [key, st] : rule_stats_)
    w.histogram(kUpstreamLatency, {{"rule", st->rule}}, st->upstream_latency);
  w.header(kStreamTtft);
  for (auto& [key, st] : rule_stats_)
    w.histogram(kStreamTtft, {{"rule", st->rule}}, st->stream_ttft);
}

// Tier 1.5: the kv_exact stage's hits, spills, cold seeds and misses, under upstream's names.
void DataPlane::renderTier15Metrics(metrics::TextWriter& w) const {
  using namespace metrics;
  struct Kv {
    const RuleStats* st;
    size_t stage;
  };
  std::vector<Kv> rules;
  for (auto& [key, st] : rule_stats_) {
    const auto& p = *st->pipeline;
    for (size_t s = 0; s < p.stage_count; ++s)
      if (p.stage_ladder[s] == routing::Ladder::kTier15) rules.push_back({st.get(), s});
  }
  auto per_rule = [&](const Family& f, auto value) {
    w.header(f);
    for (auto& r : rules)
      w.sample(f, {{"service", r.st->rule}}, static_cast<double>(value(*r.st->pipeline, r.stage)));
  };
  per_rule(kTier15Hits, [](const routing::PipelineStats& p, size_t s) {
    return p.decided[s][static_cast<size_t>(routing::DecisionKey::kKvOverlap)].load();
  });
  per_rule(kTier15Spills,
           [](const routing::PipelineStats& p, size_t s) { return p.stage_spills[s].load(); });
  per_rule(kTier15ColdSeeds,
           [](const routing::PipelineStats& p, size_t s) { return p.stage_seeds[s].load(); });
  w.header(kTier15MissReason);
  for (auto& r : rules)
    for (routing::FallReason reason : r.st->pipeline->stage_reasons[r.stage]) {
      if (reason == routing::FallReason::kEmptyPool) continue;  // (the seed's names: a guard's)
      const auto k = static_cast<size_t>(reason);
      w.sample(kTier15MissReason,
               {{"service", r.st->rule}, {"reason", routing::kFallReasonNames[k]}},
               static_cast<double>(r.st->pipeline->fallthrough[r.stage][k].load()));
    }
  per_rule(kTier15Fallthrough, [](const routing::PipelineStats& p, size_t s) {
    uint64_t n = 0;
    for (auto& x : p.fallthrough[s]) n += x.load();
    return n;
  });
  w.header(kKvSpeculativeCredits);
  w.sample(kKvSpeculativeCredits, {},
           static_cast<double>(kv_overlay_ ? kv_overlay_->credits() : 0));
  w.header(kKvSpeculativeHits);
  w.sample(kKvSpeculativeHits, {}, static_cast<double>(kv_overlay_ ? kv_overlay_->hits() : 0));
}

namespace {

// A rule's pipelines with the prefix of their stage labels: the main one (a P/D rule's prefill
// pick), a P/D rule's decode pick ("decode:") and rescue ("rescue:"), and the pooling
// requests' pipeline of a single-leg rule ("pooling:").
std::vector<std::pair<std::string, const routing::PipelineStats*>> pipelinesOf(
    const RuleStats& st) {
  std::vector<std::pair<std::string, const routing::PipelineStats*>> out{{"", st.pipeline.get()}};
  if (st.decode_pipeline) out.emplace_back("decode:", st.decode_pipeline.get());
  if (st.rescue_pipeline) out.emplace_back("rescue:", st.rescue_pipeline.get());
  if (st.pooling_pipeline) out.emplace_back("pooling:", st.pooling_pipeline.get());
  return out;
}

}  // namespace

// The pipelines: deciding stage and key, spills, fall-throughs, decision time.
void DataPlane::renderRoutingMetrics(metrics::TextWriter& w) const {
  using namespace metrics;
  w.header(kSelectorDecisions);
  for (auto& [key, st] : rule_stats_)
    for (auto& [prefix, pp] : pipelinesOf(*st)) {
      const auto& p = *pp;
      for (size_t s = 0; s < p.stage_count; ++s)
        for (size_t k = 0; k < static_cast<size_t>(routing::DecisionKey::kCount); ++k)
          if (uint64_t v = p.decided[s][k].load())
            w.sample(kSelectorDecisions,
                     {{"rule", st->rule},
                      {"selector", prefix + p.stage_names[s]},
                      {"key", routing::kDecisionKeyNames[k]}},
                     static_cast<double>(v));
    }
  w.header(kRuleRoutingInfo);
  for (auto& [key, st] : rule_stats_) {
    w.sample(kRuleRoutingInfo, {{"rule", st->rule}, {"knob", "stages"}, {"value", st->stages}}, 1);
    for (auto& [k, v] : st->routing_knobs)
      w.sample(kRuleRoutingInfo, {{"rule", st->rule}, {"knob", k}, {"value", v}}, 1);
  }
  // P/D: the tier that chose each request's prefill endpoint, summed over the P/D rules.
  std::array<uint64_t, static_cast<size_t>(PdTier::kCount)> tiers{};
  for (auto& [key, st] : rule_stats_)
    for (size_t t = 0; t < tiers.size(); ++t) tiers[t] += st->pd_tiers[t].load();
  w.header(kPdTierSelected);
  for (size_t t = 0; t < tiers.size(); ++t)
    w.sample(kPdTierSelected, {{"tier", kPdTierNames[t]}}, static_cast<double>(tiers[t]));
  w.header(kPdPrefillRedone);
  for (auto& [key, st] : rule_stats_)
    if (st->decode_pipeline)  // (P/D rules)
      w.sample(kPdPrefillRedone, {{"rule", st->rule}},
               static_cast<double>(st->pd_prefill_redone.load()));
  // The admission gate, for the rules that have it on.
  w.header(kAdmissionDecisions);
  for (auto& [key, st] : rule_stats_)
    if (st->admission_limit.load() >= 0)
      for (size_t d = 0; d < st->admission.size(); ++d)
        w.sample(kAdmissionDecisions,
                 {{"service", st->rule}, {"decision", kAdmissionDecisionNames[d]}},
                 static_cast<double>(st->admission[d].load()));
  for (const auto* f : {&kAdmissionInflight, &kAdmissionQueued, &kAdmissionLimit}) {
    w.header(*f);
    for (auto& [key, st] : rule_stats_) {
      if (st->admission_limit.load() < 0) continue;
      const int64_t v = f == &kAdmissionInflight ? st->admission_inflight.load()
                        : f == &kAdmissionQueued ? st->admission_queued.load()
                                                 : st->admission_limit.load();
      w.sample(*f, {{"service", st->rule}}, static_cast<double>(v));
    }
  }
  w.header(kSpills);
  for (auto& [key, st] : rule_stats_)
    w.sample(kSpills, {{"rule", st->rule}}, static_cast<double>(st->pipeline->spills.load()));
  renderTier15Metrics(w);
  w.header(kStageFallthrough);
  for (auto& [key, st] : rule_stats_)
    for (auto& [prefix, pp] : pipelinesOf(*st)) {
      const auto& p = *pp;
      for (size_t s = 0; s < p.stage_count; ++s)
        for (size_t r = 0; r < static_cast<size_t>(routing::FallReason::kCount); ++r)
          if (uint64_t v = p.fallthrough[s][r].load())
            w.sample(kStageFallthrough,
                     {{"rule", st->rule},
                      {"stage", prefix + p.stage_names[s]},
                      {"reason", routing::kFallReasonNames[r]}},
                     static_cast<double>(v));
      if (uint64_t v = p.no_pick.load())
        w.sample(kStageFallthrough,
                 {{"rule", st->rule}, {"stage", prefix + "none"}, {"reason", "no_pick"}},
                 static_cast<double>(v));
    }
  w.header(kRoutingFiltered);
  const auto filters = routing::candidateFilters();
  for (auto& [key, st] : rule_stats_)
    for (size_t f = 0; f < filters.size(); ++f) {
      const uint64_t v = st->eligibility.dropped[f].load();
      const auto& chain = st->candidate_filters;
      if (!filters[f].counted) continue;
      if (v > 0 || std::find(chain.begin(), chain.end(), filters[f].name) != chain.end())
        w.sample(kRoutingFiltered, {{"rule", st->rule}, {"filter", filters[f].name}},
                 static_cast<double>(v));
    }
  w.header(kDecisionSeconds);
  for (auto& [key, st] : rule_stats_)
    w.histogram(kDecisionSeconds, {{"rule", st->rule}}, st->pipeline->decision_seconds);
}

// Connections and streams, then per endpoint: in flight, failures, health, breaker.
void DataPlane::renderEndpointMetrics(metrics::TextWriter& w) const {
  using namespace metrics;
  w.header(kActiveConnections);
  w.sample(kActiveConnections, {}, static_cast<double>(stats_.active_connections.load()));
  w.header(kActiveStreams);
  w.sample(kActiveStreams, {}, static_cast<double>(stats_.active_streams.load()));
  w.header(kRequestsRefused);
  for (size_t i = 0; i < stats_.refused.size(); ++i)
    w.sample(kRequestsRefused, {{"reason", refusalName(static_cast<Refusal>(i))}},
             static_cast<double>(stats_.refused[i].load()));
  w.header(kInternalErrors);
  w.sample(kInternalErrors, {}, static_cast<double>(stats_.internal_errors.load()));
  w.header(kApiRequests);
  static const char* const kApiNames[] = {"openai",    "messages", "messages_count_tokens",
                                          "responses", "pooling",  "tokenize",
                                          "detokenize"};
  for (size_t i = 0; i < stats_.api_requests.size(); ++i)
    w.sample(kApiRequests, {{"api", kApiNames[i]}},
             static_cast<double>(stats_.api_requests[i].load()));
  w.header(kResponsePins);
  static const char* const kPinEvents[] = {"remembered", "pinned", "unknown", "refused", "foreign"};
  for (auto& [key, st] : rule_stats_)
    if (st->response_homes)
      for (size_t e = 0; e < st->response_pins.size(); ++e)
        w.sample(kResponsePins, {{"rule", st->rule}, {"event", kPinEvents[e]}},
                 static_cast<double>(st->response_pins[e].load()));
  w.header(kTokenizeApi);
  static const char* const kTokEvents[] = {"answered", "checked", "mismatched", "forwarded"};
  for (auto& [key, st] : rule_stats_)
    if (st->response_homes)  // (single-leg rules)
      for (size_t a = 0; a < 2; ++a)
        for (size_t e = 0; e < 4; ++e)
          w.sample(kTokenizeApi,
                   {{"rule", st->rule},
                    {"api", a ? "detokenize" : "tokenize"},
                    {"event", kTokEvents[e]}},
                   static_cast<double>(st->tokenize_events[a][e].load()));
  w.header(kApiPrompt);
  static const char* const kResults[] = {"converted", "unconvertible", "too_large"};
  for (size_t a = 0; a < 2; ++a)
    for (size_t r = 0; r < 3; ++r)
      w.sample(kApiPrompt, {{"api", a ? "responses" : "messages"}, {"result", kResults[r]}},
               static_cast<double>(stats_.api_prompt[a][r].load()));
  if (l4_) {
    const auto l4 = l4_->stats();
    w.header(kL4Packets);
    for (const auto& st : l4)
      w.sample(kL4Packets, {{"rule", st.rule}}, static_cast<double>(st.packets));
    w.header(kL4Bytes);
    for (const auto& st : l4)
      w.sample(kL4Bytes, {{"rule", st.rule}}, static_cast<double>(st.bytes));
    w.header(kL4Dropped);
    for (const auto& st : l4)
      for (size_t i = 0; i < std::size(st.drops); ++i)
        w.sample(kL4Dropped, {{"rule", st.rule}, {"reason", l4::L4Plane::dropReason(i)}},
                 static_cast<double>(st.drops[i]));
    // (one sample per endpoint of every L4 rule)
    auto perEndpoint = [&](const metrics::Family& f, auto value) {
      w.header(f);
      for (const auto& st : l4)
        for (const auto& e : st.endpoints)
          w.sample(f, {{"rule", st.rule}, {"endpoint", e.addr}}, static_cast<double>(value(e)));
    };
    using Ep = l4::L4Plane::ServiceStats::Endpoint;
    perEndpoint(kL4EndpointPackets, [](const Ep& e) { return e.packets; });
    perEndpoint(kL4EndpointBytes, [](const Ep& e) { return e.bytes; });
    w.header(kL4EndpointConnects);
    for (const auto& st : l4)
      for (const auto& e : st.endpoints) {
        const std::pair<const char*, uint64_t> results[] = {
            {"answered", e.answered}, {"refused", e.refused}, {"unanswered", e.unanswered}};
        for (const auto& [result, n] : results)
          w.sample(kL4EndpointConnects,
                   {{"rule", st.rule}, {"endpoint", e.addr}, {"result", result}},
                   static_cast<double>(n));
      }
    perEndpoint(kL4EndpointUp, [](const Ep& e) { return e.up ? 1 : 0; });
    perEndpoint(kL4EndpointFlows, [](const Ep& e) { return e.flows; });
  }
  w.header(kH2Connections);
  w.sample(kH2Connections, {}, static_cast<double>(stats_.h2_connections.load()));
  w.header(kH2ActiveStreams);
  w.sample(kH2ActiveStreams, {}, static_cast<double>(stats_.h2_active_streams.load()));
  w.header(kH2Streams);
  w.sample(kH2Streams, {{"event", "opened"}}, static_cast<double>(stats_.h2_streams_total.load()));
  w.sample(kH2Streams, {{"event", "refused"}},
           static_cast<double>(stats_.h2_refused_streams.load()));
  w.sample(kH2Streams, {{"event", "client_reset"}},
           static_cast<double>(stats_.h2_client_resets.load()));
  w.header(kH2ProtocolErrors);
  w.sample(kH2ProtocolErrors, {}, static_cast<double>(stats_.h2_protocol_errors.load()));
  w.header(kUpstreamH2Sessions);
  w.sample(kUpstreamH2Sessions, {}, static_cast<double>(stats_.upstream_h2_sessions.load()));
  w.header(kUpstreamH2Streams);
  static const char* const kUpH2Events[] = {"opened", "refused", "reset"};
  for (size_t e = 0; e < 3; ++e)
    w.sample(kUpstreamH2Streams, {{"event", kUpH2Events[e]}},
             static_cast<double>(stats_.upstream_h2_streams[e].load()));
  w.header(kUpstreamH2ProtocolErrors);
  w.sample(kUpstreamH2ProtocolErrors, {},
           static_cast<double>(stats_.upstream_h2_protocol_errors.load()));
  w.header(kUpstreamProtocolChosen);
  static const char* const kLearned[][2] = {
      {"http2", "alpn"}, {"http1", "alpn"}, {"http2", "h2c"}, {"http1", "h2c_answered_http1"}};
  for (size_t i = 0; i < 4; ++i)
    w.sample(kUpstreamProtocolChosen, {{"protocol", kLearned[i][0]}, {"how", kLearned[i][1]}},
             static_cast<double>(stats_.upstream_protocol_learned[i].load()));
  w.header(kTlsHandshakes);
  w.sample(kTlsHandshakes, {{"result", "ok"}}, static_cast<double>(stats_.tls_handshakes.load()));
  w.sample(kTlsHandshakes, {{"result", "failed"}},
           static_cast<double>(stats_.tls_handshake_failures.load()));
  w.header(kTlsClientCerts);
  const http::ClientCertStats& certs = listener_tls_->clientCerts();
  for (auto [result, n] : {std::pair{"verified", &certs.verified}, {"absent", &certs.absent},
                           {"missing", &certs.missing}, {"untrusted", &certs.untrusted},
                           {"revoked", &certs.revoked}, {"cn_mismatch", &certs.cn_mismatch}})
    w.sample(kTlsClientCerts, {{"result", result}}, static_cast<double>(n->load()));
  w.header(kQuotaPromptCounts);
  for (auto [method, n] : {std::pair{"token_ids", &stats_.quota_prompt_ids},
                           {"tokenizer", &stats_.quota_prompt_tokenizer},
                           {"bytes", &stats_.quota_prompt_bytes}})
    w.sample(kQuotaPromptCounts, {{"method", method}}, static_cast<double>(n->load()));
  w.header(kEndpointInflight);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kEndpointInflight, {{"endpoint", e->label}}, static_cast<double>(e->active.load()));
  w.header(kEndpointPendingPrefill);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kEndpointPendingPrefill, {{"endpoint", e->label}},
             static_cast<double>(e->pending_prefill_blocks.load()));
  w.header(kEndpointActiveStreams);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kEndpointActiveStreams, {{"endpoint", e->label}},
             static_cast<double>(e->active_streams.load()));
  w.header(kEndpointPendingPrefillTokens);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kEndpointPendingPrefillTokens, {{"endpoint", e->label}},
             static_cast<double>(std::max<int64_t>(0, e->pending_prefill_tokens.load())));
  w.header(kEndpointStartedStreams);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kEndpointStartedStreams, {{"endpoint", e->label}},
             static_cast<double>(std::max<int64_t>(0, e->started_streams.load())));
  w.header(kEndpointPrefillRate);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kEndpointPrefillRate, {{"endpoint", e->label}}, e->prefill_rate.tokensPerSecond());
  w.header(kEndpointPrefillWait);
  for (auto& [key, e] : endpoints_.all()) {
    const double rate = e->prefill_rate.tokensPerSecond();
    const double queued = static_cast<double>(std::max<int64_t>(0, e->pending_prefill_tokens.load()));
    w.sample(kEndpointPrefillWait, {{"endpoint", e->label}}, rate > 0 ? queued / rate : 0);
  }
  w.header(kEndpointConnectFailures);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kEndpointConnectFailures, {{"endpoint", e->label}},
             static_cast<double>(e->connect_failures.load()));
  w.header(kEndpointUp);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kEndpointUp, {{"endpoint", e->label}}, e->health.up() ? 1 : 0);
  w.header(kEndpointKvCapacity);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kEndpointKvCapacity, {{"endpoint", e->label}}, e->kvCapacity());
  w.header(kEndpointEngineRequests);
  for (auto& [key, e] : endpoints_.all())
    for (auto [state, v] : {std::pair{"running", e->engine_running.load()},
                            std::pair{"waiting", e->engine_waiting.load()}})
      if (v >= 0)
        w.sample(kEndpointEngineRequests, {{"endpoint", e->label}, {"state", state}},
                 static_cast<double>(v));
  w.header(kEndpointKvUsage);
  for (auto& [key, e] : endpoints_.all())
    if (const int64_t ppm = e->kv_usage_ppm.load(); ppm >= 0)
      w.sample(kEndpointKvUsage, {{"endpoint", e->label}}, static_cast<double>(ppm) / 1e6);
  w.header(kEndpointScrapes);
  for (auto& [key, e] : endpoints_.all())
    if (e->scrapes_ok.load() + e->scrapes_failed.load() > 0)
      for (auto [outcome, v] :
           {std::pair{"ok", e->scrapes_ok.load()}, std::pair{"failed", e->scrapes_failed.load()}})
        w.sample(kEndpointScrapes, {{"endpoint", e->label}, {"outcome", outcome}},
                 static_cast<double>(v));
  w.header(kBreakerState);
  for (auto& [key, e] : endpoints_.all())
    w.sample(kBreakerState, {{"endpoint", e->label}},
             static_cast<double>(static_cast<int>(e->health.breaker())));
  w.header(kBreakerTransitions);
  for (auto& [key, e] : endpoints_.all()) {
    using endpoints::BreakerState;
    for (auto [st, name] :
         {std::pair{BreakerState::kOpen, "open"}, std::pair{BreakerState::kHalfOpen, "half_open"},
          std::pair{BreakerState::kClosed, "closed"}})
      w.sample(kBreakerTransitions, {{"endpoint", e->label}, {"to", name}},
               static_cast<double>(e->health.transitions(st)));
  }
}

std::string DataPlane::renderMetrics() const {
  metrics::TextWriter w;
  renderRequestMetrics(w);
  renderRoutingMetrics(w);
  renderEndpointMetrics(w);
  using namespace metrics;
  w.header(kIdleUpstream);
  w.sample(kIdleUpstream, {}, static_cast<double>(stats_.idle_upstream.load()));
  w.header(kReapedUpstream);
  w.sample(kReapedUpstream, {}, static_cast<double>(stats_.reaped_upstream.load()));
  w.header(kDraining);
  w.sample(kDraining, {}, stats_.draining.load() ? 1 : 0);
  w.header(kLogDropped);
  w.sample(kLogDropped, {}, static_cast<double>(log::droppedLines()));
  w.header(kRules);
  w.sample(kRules, {}, static_cast<double>(rule_count_));
  w.header(kAcceptFailures);
  w.sample(kAcceptFailures, {{"reason", "descriptors"}},
           static_cast<double>(stats_.accept_failures[0].load()));
  w.sample(kAcceptFailures, {{"reason", "memory"}},
           static_cast<double>(stats_.accept_failures[1].load()));
  w.header(kUpstreamSocketFailures);
  w.sample(kUpstreamSocketFailures, {{"reason", "descriptors"}},
           static_cast<double>(stats_.upstream_socket_failures[0].load()));
  w.sample(kUpstreamSocketFailures, {{"reason", "memory"}},
           static_cast<double>(stats_.upstream_socket_failures[1].load()));
  w.header(kLoopLag);
  for (size_t i = 0; i < workers_.size(); ++i)
    w.histogram(kLoopLag, {{"worker", std::to_string(i)}}, workers_[i]->loop_lag);
  w.header(kLoopStalls);
  for (size_t i = 0; i < workers_.size(); ++i)
    for (size_t c = 0; c < kStallCauseNames.size(); ++c)
      w.sample(kLoopStalls, {{"worker", std::to_string(i)}, {"cause", kStallCauseNames[c]}},
               static_cast<double>(workers_[i]->loop_stats.stalls[c].load()));
  w.header(kWorkerCpu);
  for (size_t i = 0; i < workers_.size(); ++i)
    w.sample(kWorkerCpu, {{"worker", std::to_string(i)}},
             static_cast<double>(workers_[i]->loop_stats.cpu_ns.load()) * 1e-9);
  w.header(kWorkerCpuWait);
  for (size_t i = 0; i < workers_.size(); ++i)
    w.sample(kWorkerCpuWait, {{"worker", std::to_string(i)}},
             static_cast<double>(workers_[i]->loop_stats.cpu_wait_ns.load()) * 1e-9);
  w.header(kRelayCuts);
  for (size_t i = 0; i < stats_.relay_cuts.size(); ++i)
    w.sample(kRelayCuts, {{"reason", relayCutName(i)}},
             static_cast<double>(stats_.relay_cuts[i].load()));
  if (const sockmap::Relay* relay = sockmap::Relay::get()) {
    w.header(kSockmapAvailable);
    w.sample(kSockmapAvailable, {}, 1);
    w.header(kSockmapRelays);
    const std::pair<const char*, const std::atomic<uint64_t>*> outcomes[] = {
        {"done", &relay->relays_done},
        {"overrun", &relay->relays_overrun},
        {"reset", &relay->relays_reset},
        {"client_gone", &relay->relays_gone},
        {"over_budget", &relay->over_budget}};
    for (auto& [name, v] : outcomes)
      w.sample(kSockmapRelays, {{"outcome", name}}, static_cast<double>(v->load()));
    w.header(kSockmapBytes);
    w.sample(kSockmapBytes, {}, static_cast<double>(relay->bytes_relayed.load()));
    w.header(kSockmapArmed);
    w.sample(kSockmapArmed, {}, static_cast<double>(relay->armed_bytes.load()));
    w.header(kSockmapSockets);
    w.sample(kSockmapSockets, {}, static_cast<double>(relay->sockets_targets.load()));
  } else if (sockmap::Relay::tried()) {
    w.header(kSockmapAvailable);
    w.sample(kSockmapAvailable, {}, 0);
  }
  w.header(kHeapBytes);
  w.sample(kHeapBytes, {}, static_cast<double>(stats_.overload.heap.load()));
  w.header(kHeapLimit);
  w.sample(kHeapLimit, {}, static_cast<double>(stats_.overload.limit.load()));
  w.header(kHeapTotal);
  w.sample(kHeapTotal, {}, static_cast<double>(stats_.overload.total.load()));
  w.header(kHeapBudget);
  w.sample(kHeapBudget, {}, static_cast<double>(stats_.overload.budget.load()));
  w.header(kOverloadState);
  w.sample(kOverloadState, {}, static_cast<double>(stats_.overload.level.load()));
  w.header(kOverloadShed);
  w.sample(kOverloadShed, {}, static_cast<double>(stats_.overload_shed.load()));
  w.header(kBuildInfo);
  w.sample(kBuildInfo, {{"version", "0.1.0"}}, 1);
  std::string text = w.str();
  if (opts_.tracer) text += opts_.tracer->metricsText();  // (serve --otlp-endpoint)
  return text;
}

}  // namespace kvgate::proxy
