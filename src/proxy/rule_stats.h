// Per-rule and per-listener counters of the data plane. They outlive routing snapshots (kept by
// the DataPlane by rule key), so updating a rule does not reset them. Workers only touch atomics;
// the control thread creates entries in apply() and reads everything at scrape time.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "metrics/histogram.h"
#include "proxy/admission.h"
#include "proxy/decision_feed.h"
#include "proxy/overload.h"
#include "proxy/response_homes.h"
#include "proxy/tokenize_local.h"
#include "routing/eligibility/eligibility.h"
#include "routing/pipeline.h"
#include "routing/stages/prefix_trie.h"
#include "routing/stages/session_table.h"

namespace kvgate::proxy {

// One counter per HTTP status code 0..599 (exposition skips zeros).
struct StatusCounters {
  std::array<std::atomic<uint64_t>, 600> by_status{};
  void inc(int status) {
    if (status >= 0 && status < 600)
      by_status[static_cast<size_t>(status)].fetch_add(1, std::memory_order_relaxed);
  }
};

// loxilb_ai_pd_tier_selected_total's `tier` label.
enum class PdTier : uint8_t { kTier0, kTier1, kTier15, kTier2, kRescue, kAdmission, kCount };
inline constexpr const char* kPdTierNames[] = {"tier0", "tier1",  "tier15",
                                               "tier2", "rescue", "admission"};

struct RuleStats {
  std::string rule;      // rule name, else its key
  std::string model;     // model_name ("" = catch-all)
  std::string selector;  // selector name
  std::string stages;    // the pipeline's stage names (stage counters restart when they change)
  // The rule's effective routing knobs (routing/rule_profile.h), flattened: (knob, value).
  std::vector<std::pair<std::string, std::string>> routing_knobs;
  // By endpoint label; shared with the snapshots' routes so a request that outlives a rule
  // change still counts safely; entries of endpoints that left the rule are dropped.
  std::map<std::string, std::shared_ptr<StatusCounters>> per_endpoint;
  StatusCounters no_endpoint;  // answered by the gateway after routing (no endpoint reachable)
  metrics::Histogram upstream_latency;
  metrics::Histogram stream_ttft;
  // Which stage decided, fall-through reasons, decision time (recorded by the pipeline).
  std::shared_ptr<routing::PipelineStats> pipeline = std::make_shared<routing::PipelineStats>();
  // P/D rules: the decode pick's and the any-healthy rescue's pipelines (null otherwise).
  std::shared_ptr<routing::PipelineStats> decode_pipeline, rescue_pipeline, pooling_pipeline;
  // Endpoints the candidate filters dropped, by filter (routing/eligibility/eligibility.h).
  routing::EligibilityStats eligibility;
  std::vector<std::string> candidate_filters;  // the rule's chain now (its names)
  // Single-leg rules: which endpoint answered each Responses API response (response_homes.h).
  std::shared_ptr<ResponseHomes> response_homes;
  // previous_response_id (response_homes.h): [0] ids remembered, [1] requests pinned to the
  // endpoint holding theirs, [2] unknown (routed as any request), [3] refused (the endpoint
  // holding it is down or no longer in the rule), [4] foreign (another principal's: 404, not
  // forwarded).
  std::array<std::atomic<uint64_t>, 5> response_pins{};
  // Single-leg rules: /tokenize and /detokenize answered by the gateway (tokenize_local.h),
  // and tokenize_events[api][event] (kvgate_tokenize_api_total): [0] answered by the
  // gateway, [1] forwarded and checked: matched, [2] checked: mismatched, [3] forwarded (not
  // answerable by the gateway).
  // (a new one when the rule's engines or tokenize settings change: tokenize_sig)
  std::shared_ptr<TokenizeMirror> tokenize_mirror;
  std::string tokenize_sig;
  std::array<std::array<std::atomic<uint64_t>, 4>, 2> tokenize_events{};
  // P/D requests by the tier that chose the prefill endpoint that served them.
  std::array<std::atomic<uint64_t>, static_cast<size_t>(PdTier::kCount)> pd_tiers{};
  std::atomic<uint64_t> pd_prefill_redone{0};  // kvgate_pd_prefill_redone_total
  // P/D rules: Tier 0's pins and Tier 1's trie, while the rule's ladder has those stages (made
  // when a version first has one, dropped when a version has none; each Route holds its own
  // reference, so a request on an older snapshot keeps the table it routes with). The control
  // thread alone reads and writes these two.
  std::shared_ptr<routing::SessionTable> sessions;
  std::shared_ptr<routing::PrefixTrie> trie;
  // P/D admission gate (proxy/admission.h): decisions by kind, requests admitted and in flight,
  // requests parked now, the prefill cap (-1: the gate is off).
  std::array<std::atomic<uint64_t>, static_cast<size_t>(AdmissionDecision::kCount)> admission{};
  std::atomic<int64_t> admission_inflight{0};
  std::atomic<int64_t> admission_queued{0};
  std::atomic<int64_t> admission_limit{-1};
};

// Requests the gateway refused because it could not read them exactly as the engine will
// (kvgate_requests_refused_total{reason}; docs/governance.md "Reading requests as the engine does").
// Why a response was cut after its head went to the client (kvgate_relay_cuts_total{reason}).
enum class RelayCut : uint8_t {
  kUpstream,   // the engine closed or reset mid-body (killed, crashed, network reset)
  kClient,     // the client left (or stopped reading)
  kTimeout,    // timeoutMemberData between reads, or max_stream_duration_sec
  kMalformed,  // a chunked body that does not parse
};
inline const char* relayCutName(size_t i) {
  static const char* k[] = {"upstream", "client", "timeout", "malformed"};
  return i < 4 ? k[i] : "unknown";
}

enum class Refusal : uint8_t {
  kBadPath,          // 400 bad_path: a target that cannot be normalized (http/target.h)
  kAmbiguousModel,   // 400 ambiguous_model: repeated, undecodable or unreached body "model"
  kBodyUnreadable,   // 413 body_too_large / 400 invalid_json: a body whose model the gateway
                     // cannot read on a rule where the model matters
  kModelMismatch,    // 400 model_mismatch: X-Model names another model than the body (or none)
  kCount
};
inline const char* refusalName(Refusal r) {
  switch (r) {
    case Refusal::kBadPath: return "bad_path";
    case Refusal::kAmbiguousModel: return "ambiguous_model";
    case Refusal::kBodyUnreadable: return "body_unreadable";
    case Refusal::kModelMismatch: return "model_mismatch";
    default: return "unknown";
  }
}

struct DataPlaneStats {
  DecisionFeed decisions;  // the last routing decisions, while a dashboard watches (/ui)
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Refusal::kCount)> refused{};
  std::atomic<int64_t> active_connections{0};
  std::atomic<int64_t> active_streams{0};
  std::atomic<uint64_t> tls_handshakes{0}, tls_handshake_failures{0};  // security 1 listeners
  // HTTP/2 (h2/h2_conn.h): open connections and request streams being served; streams opened,
  // refused (over the stream bound), reset by the client; connections ended by a protocol error.
  std::atomic<int64_t> h2_connections{0}, h2_active_streams{0};
  std::atomic<uint64_t> h2_streams_total{0}, h2_refused_streams{0}, h2_client_resets{0},
      h2_protocol_errors{0};
  // HTTP/2 to the engines (h2/upstream_session.h): open connections; streams [0] opened, [1] not
  // processed by the engine (REFUSED_STREAM, past its GOAWAY: sent again), [2] reset or cut by
  // the engine; connections ended by an engine's protocol error.
  std::atomic<int64_t> upstream_h2_sessions{0};
  std::array<std::atomic<uint64_t>, 3> upstream_h2_streams{};
  std::atomic<uint64_t> upstream_h2_protocol_errors{0};
  // backend_protocol both: what new connections found: [0] h2 by ALPN, [1] http/1.1 by ALPN,
  // [2] h2c answered (SETTINGS), [3] h2c answered in HTTP/1.1.
  std::array<std::atomic<uint64_t>, 4> upstream_protocol_learned{};
  // How quota reservations counted the prompt: token ids, the model's tokenizer, bytes / 4.
  std::atomic<uint64_t> quota_prompt_ids{0}, quota_prompt_tokenizer{0}, quota_prompt_bytes{0};
  std::atomic<int64_t> idle_upstream{0};     // pooled keep-alive connections, all workers
  std::atomic<uint64_t> reaped_upstream{0};  // pooled connections closed: peer closed, too old
  std::atomic<bool> draining{false};         // SIGTERM: finishing in-flight requests
  // Accepts that failed for want of a resource: [0] descriptors (EMFILE, ENFILE), [1] memory
  // (ENOBUFS, ENOMEM); the listener pauses kAcceptPauseMs after each.
  std::array<std::atomic<uint64_t>, 2> accept_failures{};
  // Upstream connects whose socket could not be made for want of a resource (same reasons):
  // the gateway's own shortage, never blamed on the engine (Exchange::connectLeg).
  std::array<std::atomic<uint64_t>, 2> upstream_socket_failures{};
  // Responses cut mid-body (relay.cc abandonRelay), by RelayCut.
  std::array<std::atomic<uint64_t>, 4> relay_cuts{};
  OverloadMonitor::Out overload;            // the memory bound's level and heap (overload.h)
  std::atomic<uint64_t> overload_shed{0};  // requests answered 503 gateway_overloaded
  std::atomic<uint64_t> internal_errors{0};  // connections closed by an exception (a bug)
  // Requests dispatched by the API their path names ([0] openai, [1] messages, [2]
  // messages_count_tokens, [3] responses, [4] pooling, [5] tokenize, [6] detokenize:
  // request_ctx.h Api), and Messages [0] /
  // Responses [1]
  // bodies whose prompt was read from their chat form ([0] converted) or could not be ([1]
  // unconvertible, [2] too_large: routed unkeyed; api_facts.h Conversion).
  std::array<std::atomic<uint64_t>, 7> api_requests{};
  std::array<std::array<std::atomic<uint64_t>, 3>, 2> api_prompt{};
};

}  // namespace kvgate::proxy
