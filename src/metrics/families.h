// Every metric family kvgate exports, declared in one list (name, type, help, labels).
//
// Hot-path counters live in atomics owned by the objects they describe (rule stats, endpoint
// state); the exposition in exposition.cc walks them on the control thread at scrape time.
#pragma once
#include <string_view>
#include <vector>

namespace kvgate::metrics {

enum class Type { kCounter, kGauge, kHistogram };

struct Family {
  std::string_view name;
  Type type;
  std::string_view help;
  std::vector<std::string_view> labels;
};

// clang-format off
inline const Family kRequests{"kvgate_requests_total", Type::kCounter,
    "Proxied requests by rule, model pool, endpoint and HTTP status sent to the client.",
    {"rule", "model", "endpoint", "status"}};
inline const Family kUnrouted{"kvgate_requests_unrouted_total", Type::kCounter,
    "Requests answered by the gateway before an endpoint was chosen (bad input, no route, "
    "model_unavailable, not_active, no endpoint), by listener and status.",
    {"listener", "status"}};
inline const Family kUpstreamLatency{"kvgate_upstream_response_seconds", Type::kHistogram,
    "Time from sending a request upstream to receiving the response head.", {"rule"}};
inline const Family kStreamTtft{"kvgate_stream_ttft_seconds", Type::kHistogram,
    "Streams (text/event-stream): time from the request's arrival to its first event byte.",
    {"rule"}};
inline const Family kSelectorDecisions{"kvgate_selector_decisions_total", Type::kCounter,
    "Endpoint choices by rule, the routing stage that decided (selector label: rr, hash, wrr, "
    "persist, lc, chwbl, gpuaware, wrr_hash) and the key that decided (prefix, conversation, "
    "session, source, rr).", {"rule", "selector", "key"}};
inline const Family kSpills{"kvgate_selector_spills_total", Type::kCounter,
    "Bounded-load selectors (chwbl, wrr_hash) moving a request off its key's home endpoint.",
    {"rule"}};
// Tier 1.5 (the kv_exact stage) under the names of seed 000 and the upstream gateway; `service`
// is the rule's name (else its key).
inline const Family kTier15Hits{"loxilb_pd_kv_tier15_hits_total", Type::kCounter,
    "Requests Tier 1.5 (KV-exact) routed by cache overlap, by rule.", {"service"}};
inline const Family kTier15Spills{"loxilb_pd_kv_tier15_spills_total", Type::kCounter,
    "Tier 1.5 picks that left the overlap winner (over its load cap), by rule.", {"service"}};
inline const Family kTier15ColdSeeds{"loxilb_pd_kv_tier15_cold_seeds_total", Type::kCounter,
    "Tier 1.5 hits diverted to a cold endpoint (cold-start seeding), by rule.", {"service"}};
inline const Family kTier15MissReason{"loxilb_pd_kv_tier15_miss_reason_total", Type::kCounter,
    "Tier 1.5 misses by guard: all_excluded, api_mode, warmup, text_empty, model_empty, "
    "tokenize, hashes, no_worker, excluded, shallow.", {"service", "reason"}};
inline const Family kTier15Fallthrough{"loxilb_pd_kv_tier15_fallthrough_total", Type::kCounter,
    "Tier 1.5 misses handed to the rule's selector (the sum over reasons), by rule.",
    {"service"}};
inline const Family kKvSpeculativeCredits{"kvgate_kv_speculative_credits_total", Type::kCounter,
    "Blocks credited to the endpoint a Tier 1.5 request was routed to (speculative insert), "
    "until its KV events confirm them.", {}};
inline const Family kKvSpeculativeHits{"kvgate_kv_speculative_hits_total", Type::kCounter,
    "Prompt blocks Tier 1.5 matched through speculative credits rather than the index.", {}};
inline const Family kStageFallthrough{"kvgate_routing_fallthrough_total", Type::kCounter,
    "Routing stages that did not decide, by rule, stage and reason (all_excluded, empty_pool, "
    "no_key); stage \"none\" counts requests no stage could place.", {"rule", "stage", "reason"}};
inline const Family kRoutingFiltered{"kvgate_routing_filtered_total", Type::kCounter,
    "Endpoints a rule's candidate filters dropped from a request's candidates before any routing "
    "stage ran, by rule and filter (healthy, breaker, controller; each drop under the first "
    "filter that dropped it, once per leg of a P/D request; pd_role's drops, the other leg's "
    "endpoints, are not counted); every counted filter of the rule's chain is listed, 0 "
    "included.",
    {"rule", "filter"}};
inline const Family kDecisionSeconds{"kvgate_routing_decision_seconds", Type::kHistogram,
    "Time the routing pipeline took to decide, per rule (buckets 1 us .. 60 ms).", {"rule"}};
inline const Family kRequestsRefused{"kvgate_requests_refused_total", Type::kCounter,
    "Requests refused because the gateway could not read them exactly as the engine will, by "
    "reason: bad_path (a target that cannot be normalized), ambiguous_model (a repeated, "
    "undecodable or unreached body model, or form field), body_unreadable (a body too large or "
    "not JSON where the model matters), model_mismatch (X-Model names another model than the "
    "body, or the body names none).", {"reason"}};
inline const Family kInternalErrors{"kvgate_internal_errors_total", Type::kCounter,
    "Client connections closed because a request failed inside the gateway (an exception: a bug "
    "to report; the log says which).", {}};
inline const Family kApiRequests{"kvgate_api_requests_total", Type::kCounter,
    "Requests dispatched, by the API their path names: openai (completions, chat and every other "
    "path), messages (Anthropic Messages, .../v1/messages), messages_count_tokens, responses "
    "(OpenAI Responses, .../v1/responses), pooling (embeddings, rerank, score, classify), "
    "tokenize and detokenize (the engines' .../tokenize, .../detokenize).",
    {"api"}};
inline const Family kTokenizeApi{"kvgate_tokenize_api_total", Type::kCounter,
    "The engines' /tokenize and /detokenize on single-leg rules, by rule, api and event: answered "
    "(by the gateway from its tokenizer), checked (forwarded, and the engine's answer matched the "
    "gateway's), mismatched (forwarded, and it did not: the gateway stops answering that model on "
    "that rule), forwarded (not answerable by the gateway: another engine, an unknown model, an "
    "input it does not compute; docs/apis.md).", {"rule", "api", "event"}};
inline const Family kApiPrompt{"kvgate_api_prompt_total", Type::kCounter,
    "Messages and Responses requests whose prompt a rule needed, by API and result: converted "
    "(read from the chat form the engine renders), unconvertible (a body the engine would refuse, "
    "or a Responses request continuing a stored one: routed without a prompt key), too_large "
    "(over 2 MiB: not converted, routed without a prompt key).", {"api", "result"}};
inline const Family kResponsePins{"kvgate_responses_previous_total", Type::kCounter,
    "The Responses API's stored responses, by rule and event: remembered (an answer's id and its "
    "endpoint), pinned (a request naming a stored response, by previous_response_id or by the "
    "path of a retrieve or cancel, sent to that endpoint), unknown (an "
    "id this gateway did not relay: routed as any request), refused (503: the endpoint holding it "
    "is down or no longer in the rule), foreign (another principal's response: 404, or 400 "
    "request_id_in_use for a create naming it; not forwarded).", {"rule", "event"}};
inline const Family kActiveConnections{"kvgate_active_client_connections", Type::kGauge,
    "Open client connections on the data plane.", {}};
inline const Family kActiveStreams{"kvgate_active_streams", Type::kGauge,
    "Responses being relayed as text/event-stream right now.", {}};
inline const Family kH2Connections{"kvgate_h2_connections", Type::kGauge,
    "Open HTTP/2 client connections (h2c by prior knowledge), counted in "
    "kvgate_active_client_connections too.", {}};
inline const Family kH2ActiveStreams{"kvgate_h2_active_streams", Type::kGauge,
    "HTTP/2 request streams whose request is being served right now.", {}};
inline const Family kH2Streams{"kvgate_h2_streams_total", Type::kCounter,
    "HTTP/2 request streams, by event: opened, refused (over --h2-max-streams: RST_STREAM "
    "REFUSED_STREAM), client_reset (the client sent RST_STREAM).", {"event"}};
inline const Family kH2ProtocolErrors{"kvgate_h2_protocol_errors_total", Type::kCounter,
    "HTTP/2 connections ended by a protocol error or a flood (GOAWAY sent).", {}};
inline const Family kUpstreamH2Sessions{"kvgate_upstream_h2_sessions", Type::kGauge,
    "Open HTTP/2 connections to engines (rules with backend_protocol http2).", {}};
inline const Family kUpstreamH2Streams{"kvgate_upstream_h2_streams_total", Type::kCounter,
    "HTTP/2 streams to engines, by event: opened, refused (not processed by the engine: "
    "REFUSED_STREAM or past its GOAWAY; sent again), reset (reset by the engine, or ended for its "
    "malformed answer; not the gateway's own cancels).", {"event"}};
inline const Family kUpstreamH2ProtocolErrors{"kvgate_upstream_h2_protocol_errors_total",
    Type::kCounter, "HTTP/2 connections to engines ended by a protocol error of the engine's.", {}};
inline const Family kUpstreamProtocolChosen{"kvgate_upstream_protocol_learned_total",
    Type::kCounter,
    "Rules with backend_protocol both: new connections on which an engine was found to speak "
    "HTTP/2 or HTTP/1.1 (how: alpn, or h2c_answered_http1 for an h2c preface answered in "
    "HTTP/1.1).",
    {"protocol", "how"}};
inline const Family kOtlpSpans{"kvgate_otlp_spans_total", Type::kCounter,
    "Trace spans (serve --otlp-endpoint): exported, dropped_queue_full (the export queue was "
    "full: the collector is slow or down), export_failed (a batch the collector refused or that "
    "timed out), dropped_at_stop (left when the last flush at shutdown ran out of time or failed).",
    {"outcome"}};
inline const Family kOtlpExports{"kvgate_otlp_exports_total", Type::kCounter,
    "OTLP/HTTP export requests (batches of spans), by result.", {"result"}};
inline const Family kOtlpQueue{"kvgate_otlp_queue_spans", Type::kGauge,
    "Finished spans waiting for the export thread.", {}};
inline const Family kUiViewers{"kvgate_ui_viewers", Type::kGauge,
    "Live dashboards (/ui) streaming from the management API now.", {}};
inline const Family kUiSnapshots{"kvgate_ui_snapshots_total", Type::kCounter,
    "Dashboard snapshots: sent, or viewer_dropped (a viewer that took none within 5 s).",
    {"outcome"}};
inline const Family kUiDecisionsDropped{"kvgate_ui_decisions_dropped_total", Type::kCounter,
    "Routing decisions a worker left out of the dashboard's feed rather than wait for its lock.",
    {}};
inline const Family kL4Packets{"kvgate_l4_packets_total", Type::kCounter,
    "Packets the L4 data path forwarded for an L4 (mode 0-3, 5) rule (both directions), by rule key.",
    {"rule"}};
inline const Family kL4Dropped{"kvgate_l4_dropped_total", Type::kCounter,
    "Packets to an L4 (mode 0-3, 5) rule's VIP the L4 data path dropped, by rule key and reason: "
    "no_endpoint (none up), untracked (a TCP packet of a connection it does not track, not a "
    "SYN), no_port (no free source port toward the endpoint: modes 1, 2, 5; mode 0's port held by a "
    "flow of another VIP; a flow's port taken after an eviction), no_route (modes 1-3, 5: no "
    "route, DSR's endpoint not a neighbour, forwarding off, TTL out or over the MTU).",
    {"rule", "reason"}};
inline const Family kL4Bytes{"kvgate_l4_bytes_total", Type::kCounter,
    "Bytes (whole packets) the L4 data path forwarded for an L4 (mode 0-3, 5) rule, by rule key.", {"rule"}};
inline const Family kL4EndpointPackets{"kvgate_l4_endpoint_packets_total", Type::kCounter,
    "Packets the L4 data path forwarded for the flows of one endpoint of an L4 rule (both "
    "directions), by rule key and endpoint (ip:port). Follows the endpoint when its place in the "
    "rule's list changes; the flows it had before such a change count under the rule only.",
    {"rule", "endpoint"}};
inline const Family kL4EndpointBytes{"kvgate_l4_endpoint_bytes_total", Type::kCounter,
    "Bytes (whole packets) the L4 data path forwarded for the flows of one endpoint of an L4 "
    "rule, by rule key and endpoint (ip:port).",
    {"rule", "endpoint"}};
inline const Family kL4EndpointFlows{"kvgate_l4_endpoint_flows", Type::kGauge,
    "Live flows (tracked, open, not idle) of one endpoint of an L4 rule, counted every second while "
    "a sel 4 rule is installed, every 10 s otherwise; "
    "sel 4 (lc) gives new flows to the endpoint up with the fewest.",
    {"rule", "endpoint"}};
inline const Family kL4EndpointConnects{"kvgate_l4_endpoint_connects_total", Type::kCounter,
    "TCP connects the L4 data path saw to one endpoint of an L4 rule, by result: answered (its "
    "SYN-ACK), refused (its RST), unanswered (the client's SYN sent again half a second or more "
    "after the last with no answer yet; once a flow). Passive health and the circuit breaker read them; DSR rules count none.",
    {"rule", "endpoint", "result"}};
inline const Family kL4EndpointUp{"kvgate_l4_endpoint_up", Type::kGauge,
    "1 when an endpoint of an L4 rule gets new flows, 0 when its probe, passive health or open "
    "circuit breaker keeps them away.",
    {"rule", "endpoint"}};
inline const Family kTlsHandshakes{"kvgate_tls_handshakes_total", Type::kCounter,
    "TLS handshakes on data-plane listeners (rules with security 1), by result (ok, failed).",
    {"result"}};
inline const Family kTlsClientCerts{"kvgate_tls_client_certs_total", Type::kCounter,
    "Client certificates on listeners with mtls_frontend, by result: verified, absent (optional "
    "mode), and the refusals missing (required mode), untrusted, revoked, cn_mismatch.",
    {"result"}};
inline const Family kQuotaPromptCounts{"kvgate_quota_prompt_counts_total", Type::kCounter,
    "How quota reservations counted the prompt: token_ids (a token-id prompt), tokenizer (the "
    "model's tokenizer, serve --models-dir), bytes (an estimate, 4 bytes a token).",
    {"method"}};
inline const Family kEndpointInflight{"kvgate_endpoint_inflight_requests", Type::kGauge,
    "Requests in flight to an endpoint through this gateway.", {"endpoint"}};
inline const Family kEndpointPendingPrefill{"kvgate_endpoint_pending_prefill_blocks",
    Type::kGauge,
    "Uncached prompt blocks of streaming requests this gateway sent to an endpoint whose first "
    "response byte has not arrived yet (the prefill queued there; streams Tier 1.5 keyed on "
    "single-pool rules, and P/D prefill legs Tier 1.5 keyed until the engine answers them).",
    {"endpoint"}};
inline const Family kEndpointPendingPrefillTokens{"kvgate_endpoint_pending_prefill_tokens",
    Type::kGauge, "The same queued prefill in tokens.", {"endpoint"}};
inline const Family kEndpointStartedStreams{"kvgate_endpoint_started_streams", Type::kGauge,
    "An endpoint's event streams being relayed now whose first body byte (first token) was "
    "relayed: past their prefill (the predict laws weigh them by "
    "LOXILB_KV_PREDICT_DECODE_WEIGHT_PCT; a P/D request's stream counts on its decode endpoint).",
    {"endpoint"}};
inline const Family kEndpointActiveStreams{"kvgate_endpoint_active_streams", Type::kGauge,
    "Answers of this endpoint being relayed as event streams now.", {"endpoint"}};
inline const Family kEndpointPrefillRate{"kvgate_endpoint_prefill_rate_tokens_per_second",
    Type::kGauge,
    "An endpoint's prefill throughput estimated online from those streams' first bytes (and P/D "
    "prefill legs' answers): (queued "
    "tokens ahead + the request's own uncached tokens) / time to its first byte, averaged "
    "exponentially (weight 0.1; samples under 64 tokens skipped); 0 until the first sample.",
    {"endpoint"}};
inline const Family kEndpointPrefillWait{"kvgate_endpoint_prefill_wait_seconds", Type::kGauge,
    "The queueing delay a new request's prefill would meet there: queued prefill tokens / the "
    "estimated rate (0 while no rate is known).",
    {"endpoint"}};
inline const Family kEndpointConnectFailures{"kvgate_endpoint_connect_failures_total",
    Type::kCounter, "Failed connection attempts to an endpoint.", {"endpoint"}};
inline const Family kEndpointUp{"kvgate_endpoint_up", Type::kGauge,
    "1 when the endpoint passes its health checks (active probe and passive detection).",
    {"endpoint"}};
inline const Family kEndpointKvCapacity{"kvgate_endpoint_kv_capacity_blocks", Type::kGauge,
    "KV capacity (blocks) the Tier 1.5 selection law uses: the endpoint's kvCapacityBlocks, else "
    "vllm:cache_config_info num_gpu_blocks from its /metrics; 0 = unknown.", {"endpoint"}};
inline const Family kEndpointEngineRequests{"kvgate_endpoint_engine_requests", Type::kGauge,
    "Requests the engine reports (its /metrics), by state: running, waiting.",
    {"endpoint", "state"}};
inline const Family kEndpointKvUsage{"kvgate_endpoint_kv_usage_ratio", Type::kGauge,
    "KV-cache usage the engine reports (0-1).", {"endpoint"}};
inline const Family kEndpointScrapes{"kvgate_endpoint_scrapes_total", Type::kCounter,
    "GET /metrics scrapes of engines behind kvExactMode rules, by outcome: ok, failed.",
    {"endpoint", "outcome"}};
inline const Family kBreakerState{"kvgate_endpoint_breaker_state", Type::kGauge,
    "Circuit breaker state: 0 closed, 1 open, 2 half-open.", {"endpoint"}};
inline const Family kBreakerTransitions{"kvgate_endpoint_breaker_transitions_total",
    Type::kCounter, "Circuit breaker transitions by target state.", {"endpoint", "to"}};
inline const Family kIdleUpstream{"kvgate_upstream_idle_connections", Type::kGauge,
    "Keep-alive upstream connections idle in the workers' pools.", {}};
inline const Family kReapedUpstream{"kvgate_upstream_reaped_total", Type::kCounter,
    "Pooled upstream connections closed while idle: closed by the peer, older than "
    "--upstream-idle-ms, or their endpoint removed.", {}};
inline const Family kDraining{"kvgate_draining", Type::kGauge,
    "1 while the gateway drains on shutdown (no new connections, in-flight requests finish).",
    {}};
inline const Family kKvBlocks{"kvgate_kv_blocks", Type::kGauge,
    "KV blocks the gateway's index holds for a worker's event publisher (all DP ranks), as "
    "mirrored from its KV events.", {"source"}};
inline const Family kKvBatches{"kvgate_kv_batches_total", Type::kCounter,
    "KV-event batches applied, by publisher.", {"source"}};
inline const Family kKvLostBatches{"kvgate_kv_lost_batches_total", Type::kCounter,
    "KV-event batches missing from a publisher's sequence (gaps).", {"source"}};
inline const Family kKvRestarts{"kvgate_kv_restarts_total", Type::kCounter,
    "Publisher restarts seen (sequence going back): that rank's inventory was cleared.",
    {"source"}};
inline const Family kKvClears{"kvgate_kv_clears_total", Type::kCounter,
    "Inventory clears (AllBlocksCleared, restarts, gaps too large to keep).", {"source"}};
inline const Family kKvReplays{"kvgate_kv_replays_total", Type::kCounter,
    "KV-event replays (kvReplayPort) by outcome: ok (gap covered), partial (history lost: "
    "cleared), timeout, overflow (too many live batches held), busy (too many replays: the "
    "no-replay rule applied).", {"source", "outcome"}};
inline const Family kKvReplayedBatches{"kvgate_kv_replayed_batches_total", Type::kCounter,
    "Batches applied from replays.", {"source"}};
inline const Family kKvSubscriberConnected{"loxilb_kv_subscriber_connected", Type::kGauge,
    "1 while every DP rank's KV-event subscriber of the source is connected (ZMQ socket "
    "monitor), else 0.", {"source"}};
inline const Family kKvSubscriberReconnects{"loxilb_kv_subscriber_reconnect_total",
    Type::kCounter, "KV-event subscriber connections made after a rank's first.", {"source"}};
inline const Family kKvHashChecks{"kvgate_kv_hash_checks_total", Type::kCounter,
    "Stored blocks checked against the declared hash contract (LLB_KV_NONE_HASH_SEED with a "
    "kvHashAlgo of sha256_cbor or xxhash_cbor), by result: ok, mismatch, unverifiable.",
    {"source", "result"}};
inline const Family kKvHashContractBroken{"kvgate_kv_hash_contract_broken", Type::kGauge,
    "1 when the source's last checked store broke the declared hash contract (Tier 1.5 then "
    "skips it: reason hash_contract), else 0.", {"source"}};
inline const Family kKvEvicted{"kvgate_kv_evicted_blocks_total", Type::kCounter,
    "Blocks the index dropped for its memory cap (LOXILB_KV_MAX_BLOCKS per worker, oldest first).",
    {"source"}};
inline const Family kKvProbeLimited{"kvgate_kv_probe_limited_blocks_total", Type::kCounter,
    "Blocks the index did not store because their probe in the block table would pass its bound "
    "(128 slots): a sign of colliding fingerprints (hash flooding); such blocks are not routed "
    "to.", {"source"}};
inline const Family kKvLag{"kvgate_kv_event_lag_seconds", Type::kGauge,
    "Age of the source's last applied batch when it was applied: the gateway's wall clock minus "
    "the batch's timestamp (publisher clock; skew shows here), 0 when negative.", {"source"}};
inline const Family kPdKvBlocks{"loxilb_pd_kv_blocks", Type::kGauge,
    "KV blocks mirrored for each endpoint of a kvExactMode rule (all its DP ranks), under the "
    "upstream gateway's name; service is the rule's name, else its key.", {"service", "ep_idx"}};
inline const Family kKvRejected{"kvgate_kv_rejected_total", Type::kCounter,
    "KV-event messages rejected, nothing applied: reason malformed (frames) or decode (payload).",
    {"source", "reason"}};
inline const Family kKvSkipped{"kvgate_kv_skipped_total", Type::kCounter,
    "KV events or blocks not applied: duplicate_block (a block the worker already holds: "
    "re-sent stores are idempotent), orphan (unknown parent), misfit (token count), "
    "other_medium (not GPU or not full attention), unknown_removal, unknown_event (tag).",
    {"source", "reason"}};
inline const Family kKvIndexBytes{"kvgate_kv_index_bytes", Type::kGauge,
    "Bytes held by the KV index (fingerprint table and per-worker maps).", {}};
inline const Family kLogDropped{"kvgate_log_dropped_total", Type::kCounter,
    "Log lines dropped because a thread's bounded log buffer was full (the log writer fell "
    "behind).", {}};
inline const Family kRules{"kvgate_rules", Type::kGauge, "Rules configured.", {}};
inline const Family kAcceptFailures{"kvgate_accept_failures_total", Type::kCounter,
    "Accept attempts of the data plane that failed for want of a resource: reason descriptors "
    "(EMFILE, ENFILE: at the open-files limit) or memory (ENOBUFS, ENOMEM); each pauses that "
    "listener's accept loop on that worker 100 ms (about 10 a second while it lasts) instead of "
    "spinning. The connection waits in the backlog.",
    {"reason"}};
inline const Family kUpstreamSocketFailures{"kvgate_upstream_socket_failures_total",
    Type::kCounter,
    "Upstream connects that found no descriptor or memory for their socket (reason descriptors: "
    "EMFILE, ENFILE; memory: ENOBUFS, ENOMEM), once per connect: the gateway's own shortage, "
    "not the engine's. The connect is tried again every 100 ms for up to 1 s, then the client "
    "gets 503 gateway_out_of_resources (P/D legs: the leg fails); no endpoint's health or "
    "breaker is charged.",
    {"reason"}};
inline const Family kLoopLag{"kvgate_worker_loop_lag_seconds", Type::kHistogram,
    "How late each data-plane worker's event loop ran a timer due every 100 ms: the wait any "
    "event queued at that moment had (long handlers, handshake bursts, blocking calls). Buckets "
    "10 us .. 600 ms.", {"worker"}};
inline const Family kLoopStalls{"kvgate_worker_loop_stalls_total", Type::kCounter,
    "Ticks of a worker's loop probe that ran 10 ms or more late, by cause (proxy/loop_probe.h): "
    "busy (its own handlers ran), cpu_wait (ready, but other threads or processes held the "
    "CPUs), steal (the VM's host ran something else), blocked (asleep in a blocking call), "
    "unknown (no scheduler accounting).", {"worker", "cause"}};
inline const Family kWorkerCpu{"kvgate_worker_cpu_seconds_total", Type::kCounter,
    "Time each data-plane worker's thread spent on a CPU (/proc/thread-self/schedstat).",
    {"worker"}};
inline const Family kWorkerCpuWait{"kvgate_worker_cpu_wait_seconds_total", Type::kCounter,
    "Time each data-plane worker's thread was ready to run but waited for a CPU: a machine "
    "short of cores shows here before it shows in latency.", {"worker"}};
inline const Family kRuleRoutingInfo{"kvgate_rule_routing_info", Type::kGauge,
    "What each rule routes with (always 1): knob stages (the pipeline, comma-terminated), then "
    "every routing knob its stages use with its effective value (the rule's field, else the "
    "environment's default read at start, else the built-in one), as in the rule's GET "
    "\"effective\" block.", {"rule", "knob", "value"}};
inline const Family kRelayCuts{"kvgate_relay_cuts_total", Type::kCounter,
    "Responses cut after their head reached the client, by reason: upstream (the engine closed "
    "or reset mid-body: the client's stream ends without its last chunk), client (the client "
    "left: the engine's request is aborted), timeout (timeoutMemberData between reads or "
    "max_stream_duration_sec), malformed (a chunked body that does not parse).", {"reason"}};
inline const Family kSockmapAvailable{"kvgate_sockmap_available", Type::kGauge,
    "1 when the sockmap relay is loaded (sockMapMode response/both rules splice their response "
    "bodies in the kernel), 0 when the kernel refused it (the log says why; the rules are relayed "
    "in userspace), absent before a sockMapMode rule was first served.", {}};
inline const Family kSockmapRelays{"kvgate_sockmap_relays_total", Type::kCounter,
    "Response bodies the sockmap relay was asked for, by how they ended: done (spliced whole), "
    "client_gone (the client's socket refused the redirect: both connections cut), reset (POST "
    "/netlox/v1/config/sockmapreset), over_budget (relayed in userspace: the bodies armed at once "
    "would pass --sockmap-budget-bytes), overrun (a guard: a message longer than the body's "
    "rest). A body cut by the client leaving, a timeout or the engine closing shows in "
    "kvgate_relay_cuts_total.", {"outcome"}};
inline const Family kSockmapBytes{"kvgate_sockmap_bytes_total", Type::kCounter,
    "Response body bytes spliced by the sockmap relay (never read by the gateway).", {}};
inline const Family kSockmapArmed{"kvgate_sockmap_armed_bytes", Type::kGauge,
    "Body bytes armed in the sockmap relay now (bounded by --sockmap-budget-bytes: what the "
    "kernel may hold for clients that read slowly).", {}};
inline const Family kSockmapSockets{"kvgate_sockmap_target_sockets", Type::kGauge,
    "Client connections registered as sockmap relay targets (those a body was spliced to).", {}};
inline const Family kHeapBytes{"kvgate_heap_bytes", Type::kGauge,
    "Heap in use by the gateway (glibc mallinfo2: allocated chunks plus mmapped ones) less the KV "
    "index (bounded by its own cap; shedding cannot free it), sampled every 250 ms while a "
    "memory bound is set: what the bound is compared with.", {}};
inline const Family kHeapLimit{"kvgate_heap_limit_bytes", Type::kGauge,
    "The memory bound (--max-heap-bytes, or 70 % of what the cgroup's memory limit leaves above "
    "the resident set at startup); 0 = none.", {}};
inline const Family kHeapTotal{"kvgate_heap_total_bytes", Type::kGauge,
    "The whole heap in use (mallinfo2), KV index included, sampled with kvgate_heap_bytes.", {}};
inline const Family kHeapBudget{"kvgate_heap_budget_bytes", Type::kGauge,
    "The whole heap's budget: 85 % of what the cgroup's memory limit leaves above the resident "
    "set at startup (the cgroup default only); 0 = none.", {}};
inline const Family kOverloadState{"kvgate_overload_state", Type::kGauge,
    "0 normal; 1 shedding (the requests' heap >= 90 % of its bound, or the whole heap >= 90 % "
    "of its budget: new requests get 503 gateway_overloaded); 2 also not accepting (>= 98 %). "
    "Down a level below 5 points under the threshold.", {}};
inline const Family kOverloadShed{"kvgate_overload_shed_total", Type::kCounter,
    "Requests answered 503 gateway_overloaded at the memory bound.", {}};
inline const Family kBuildInfo{"kvgate_build_info", Type::kGauge, "Build information.",
    {"version"}};
inline const Family kTokenizers{"kvgate_tokenizers", Type::kGauge,
    "Tokenizers looked up in --models-dir, by model and state (1 per model): loaded, "
    "missing (no files: routing that needs token ids falls back), or error (broken files).",
    {"model", "state"}};
inline const Family kTokenizeRequests{"kvgate_tokenize_requests_total", Type::kCounter,
    "POST /kvgate/v1/tokenize calls on the management API, by outcome (ok, bad_request, "
    "no_tokenizer, error).", {"outcome"}};
inline const Family kPromptTokenizer{"kvgate_kv_prompt_tokenizer_total", Type::kCounter,
    "Tier 1.5's prompt tokenizer (serve --models-dir), by event: loaded (a model's tokenizer), "
    "load_failed, truncated (a prompt cut at LOXILB_KV_TOKENIZE_MAX_BYTES), too_large (a chat "
    "not rendered: over twice that bound or 4096 messages), queue_full (a load not queued).",
    {"event"}};
// The P/D ladder (seed 000): which tier picked the prefill endpoint; rescue = no prefill/decode
// pair, a role-less endpoint served the request alone.
inline const Family kPdTierSelected{"loxilb_ai_pd_tier_selected_total", Type::kCounter,
    "P/D requests by the tier that chose the prefill endpoint: tier0 (session), tier1 (prefix "
    "trie), tier15 (KV-exact), tier2 (min-load), rescue (any-healthy, no P/D pair).", {"tier"}};
inline const Family kPdPrefillRedone{"kvgate_pd_prefill_redone_total", Type::kCounter,
    "P/D prefills sent again because the decode endpoint a push connector (vLLM without "
    "kv_transfer_params) sent the KV to was unreachable.", {"rule"}};
// The admission gate of P/D rules (proxy/admission.h), upstream's names; service = rule name.
inline const Family kAdmissionDecisions{"loxilb_ai_admission_decisions_total", Type::kCounter,
    "Admission decisions: admit, park (parked, then admitted), shed (429), valve (503), timeout "
    "(504), drained (503); observe mode: would_park, would_shed.", {"service", "decision"}};
inline const Family kAdmissionInflight{"loxilb_ai_admission_inflight", Type::kGauge,
    "Requests the admission gate admitted that are in flight.", {"service"}};
inline const Family kAdmissionQueued{"loxilb_ai_admission_queued", Type::kGauge,
    "Requests parked by the admission gate now.", {"service"}};
inline const Family kAdmissionLimit{"loxilb_ai_admission_limit", Type::kGauge,
    "The per-prefill-endpoint in-flight cap (0 = none).", {"service"}};
// clang-format on

// clang-format off
inline const std::vector<const Family*>& allFamilies() {
  static const std::vector<const Family*> k = {
      &kRequests,          &kUnrouted,      &kUpstreamLatency,    &kStreamTtft,
      &kSelectorDecisions, &kSpills,        &kTier15Hits,         &kTier15Spills,
      &kTier15ColdSeeds,   &kTier15MissReason, &kTier15Fallthrough, &kKvSpeculativeCredits,
      &kKvSpeculativeHits, &kStageFallthrough, &kRoutingFiltered, &kPdTierSelected, &kPdPrefillRedone, &kAdmissionDecisions,
      &kAdmissionInflight, &kAdmissionQueued, &kAdmissionLimit,
      &kDecisionSeconds,
      &kActiveConnections, &kActiveStreams, &kTlsHandshakes, &kTlsClientCerts, &kQuotaPromptCounts,
      &kEndpointInflight,
      &kEndpointPendingPrefill,
      &kEndpointConnectFailures,
      &kEndpointUp,        &kEndpointKvCapacity, &kEndpointEngineRequests, &kEndpointKvUsage,
      &kEndpointScrapes,   &kBreakerState,  &kBreakerTransitions, &kIdleUpstream,
      &kReapedUpstream,    &kDraining,      &kLogDropped,         &kRules, &kAcceptFailures, &kUpstreamSocketFailures,
      &kEndpointPendingPrefillTokens, &kEndpointPrefillRate, &kEndpointPrefillWait,
      &kLoopLag, &kLoopStalls, &kWorkerCpu, &kWorkerCpuWait, &kRuleRoutingInfo, &kRelayCuts, &kSockmapAvailable, &kSockmapRelays, &kSockmapBytes, &kSockmapArmed, &kSockmapSockets, &kEndpointActiveStreams, &kHeapBytes, &kHeapLimit, &kHeapTotal, &kHeapBudget, &kOverloadState, &kOverloadShed,
      &kBuildInfo,         &kTokenizers,    &kTokenizeRequests,   &kTokenizeApi,   &kPromptTokenizer,   &kKvBlocks,
      &kKvBatches,         &kKvLostBatches, &kKvRestarts,         &kKvClears,
      &kKvReplays,         &kKvReplayedBatches, &kKvSubscriberConnected,
      &kKvSubscriberReconnects, &kKvHashChecks, &kKvHashContractBroken, &kKvEvicted, &kKvProbeLimited, &kKvLag,
      &kPdKvBlocks, &kKvRejected,        &kKvSkipped,     &kKvIndexBytes};
  return k;
}
// clang-format on

}  // namespace kvgate::metrics
