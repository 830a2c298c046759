// One simulated vLLM worker: an OpenAI-compatible HTTP server with vLLM's response shapes,
// error JSON, Prometheus metrics, a vLLM-style prefix cache and fault injection.
//
// Timing (--timing; every delay is divided by --speedup; waits use asio::steady_timer, the
// thread never blocks):
//   step (default): each data-parallel rank is a continuous-batching engine (sim/batch_engine.h)
//     whose steps take the time sim/step_model.h gives them (shared/reference/benchmarks.md §2):
//     prefill chunks and decodes share steps, cached prefix tokens skip prefill compute but still
//     cost attention, batches are bounded by --max-num-seqs and --max-num-batched-tokens, KV
//     blocks are admitted, grown during decode, preempted and evicted LRU. A request first waits
//     --api-ms (vLLM's per-request API overhead), then joins its rank's queue; each token is sent
//     when the step producing it ends. The gap between a step's deadline and when its timer
//     really fired is the timer slip (kvgate_sim_timer_slip_seconds).
//   fixed: the earlier model, kept for protocol tests and the SSE relay benchmark, whose
//     point is a steady pace: wait FIFO for one of --max-concurrency slots, then
//     TTFT = prefill_base_ms + uncached_prompt_tokens * prefill_us_per_token / 1000, and one
//     token every itl_ms after that.
// Streaming responses send their headers before any wait (as vLLM does); non-streaming ones send
// everything when generation is done.
//
// Output is deterministic: the words come from a fixed list, drawn by splitmix64 seeded with
// (--seed, XXH3 of the prompt token ids); each word is one token.
//
// A client that goes away is detected by a failed write or, while the request waits, by watching
// the socket for EOF. The request then stops, releases its slot, engine sequence and cache
// blocks, and counts in kvgate_sim_requests_aborted_total.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/result.h"
#include "http/server.h"
#include "http/tls.h"
#include "sim/batch_engine.h"
#include "sim/kv_publisher.h"
#include "sim/pd_exchange.h"
#include "sim/prefix_cache.h"
#include "sim/tokenizer.h"
#include "sim/wire.h"

namespace kvgate::sim {

// Fault knobs of one worker (also settable with POST /sim/fault).
struct FaultState {
  int64_t fail_requests = 0;            // next N inference requests fail with fail_status
  int fail_status = 500;                // 400..599
  bool refuse_connections = false;      // listening socket closed
  int64_t stall_ms = 0;                 // sleep before response headers
  int64_t close_mid_stream_after = -1;  // < 0 disabled; close after K stream events
  int64_t event_delay_ms = 0;           // extra delay between stream events
  // KV-event faults, actions taken once when set: the next N batches are kept off the live stream
  // (still replayable); a publisher restart (sequence from 0, replay buffer and cache emptied).
  int64_t kv_drop_batches = 0;
  bool kv_restart = false;
};

// Applies the fault fields of a JSON object to `f` ("reset":true first clears it; "worker" is
// ignored here). Returns an error message, or "" on success; `f` is untouched on error.
std::string applyFaultJson(const nlohmann::json& j, FaultState& f);

struct SimConfig {
  std::string engine = "vllm";
  std::shared_ptr<http::TlsFiles> tls;  // --tls-cert/--tls-key: every worker serves HTTPS
  std::vector<std::string> models{"sim-model"};  // first = default
  uint64_t seed = 1;
  double speedup = 1.0;
  size_t block_size = 16;
  size_t num_blocks = 31250;  // ~500k tokens: an 8B model's KV on one H100 (benchmarks.md §2)
  bool fixed_timing = false;  // --timing fixed (else step)
  StepParams step;            // --timing step: the step model's parameters
  EngineLimits limits;        // and batch limits
  double api_ms = 0;          // per-request API overhead before the engine queue
  double jitter = 0.03;       // Gaussian sd of each step's duration (clamped to +-70%)
  double prefill_us_per_token = 100;
  double prefill_base_ms = 5;
  double itl_ms = 10;
  size_t max_concurrency = 64;
  int64_t default_max_tokens = 16;
  int64_t max_model_len = 131072;
  uint64_t keepalive_timeout_ms = 5000;  // idle keep-alive connections closed (uvicorn: 5 s)
  bool stamp_events = false;             // add "kvgate_sent_us" (send time) to each token event
  // --detokenize-clean-up: /detokenize applies transformers' clean-up as the model's config
  // says (nullopt: transformers before 5.7), always (true) or never (false: 5.7 and later).
  std::optional<bool> detokenize_clean_up;
  bool responses_store = false;  // --responses-store: keep served Responses ids (vLLM's store)
  // --anthropic-usage: Messages streams carry usage as Anthropic's own API does (message_start
  // input and 1 output token, message_delta the output count only), not as vLLM does.
  bool anthropic_usage = false;
  // --unknown-events: Messages and Responses streams carry an event of a type no client knows
  // after their first one (an engine newer than the gateway).
  bool unknown_events = false;
  bool cache_decode = false;             // --kv-cache-decode: blocks completed during decode
                                         // enter the prefix cache (and KV events), as in vLLM
  KvEventsConfig kv_events;              // --kv-events*: publish vLLM KV events over ZMQ
  std::string kv_hash_seed;              // the process's PYTHONHASHSEED for block hashes
  FaultState faults;                     // initial faults
  std::string models_dir;                // --models-dir: real tokenizers for models found there
  // Per served model (filled by sim_main from models_dir); a model absent here uses the
  // SimpleTokenizer stand-in.
  std::map<std::string, std::shared_ptr<const Tokenizer>> tokenizers;
  // P/D disaggregation (docs/simulator.md "P/D"): each worker's role, "prefill", "decode" or ""
  // (both: plain requests), worker i taking roles[i % size]; --engine picks the dialect.
  std::vector<std::string> roles;
  double pd_transfer_us_per_block = 80;  // decode: KV transfer time per pulled block
  int64_t pd_hold_ms = 480000;           // prefill: blocks held for a decode (vLLM's 480 s)
  int64_t pd_wait_ms = 30000;            // SGLang decode: wait for the prefill of its room
  uint16_t pd_bootstrap_port = 8998;     // SGLang prefill's bootstrap port
  bool pd_push = false;                  // vLLM: --pd-connector p2p (push by request id)
  PdExchange* pd_exchange = nullptr;     // the fleet's meeting point (set by sim_main)
};

class Worker;
// All workers of one `kvgate sim` process; /sim/fault {"worker":i} on any of them targets i.
using Fleet = std::vector<std::unique_ptr<Worker>>;

class Worker {
 public:
  enum class Role : uint8_t { kBoth, kPrefill, kDecode };
  Worker(asio::io_context& io, const SimConfig& cfg, size_t index, const Fleet* fleet);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  Result<uint16_t> listen(const std::string& host, uint16_t port);
  void unlisten();  // closes the listener (used to retry another port)
  // Applies refuse_connections from the initial fault state; call after listen().
  Result<void> applyInitialFaults();
  // Stops accepting, closes connections and wakes every waiting request so it ends.
  void stop();

  const std::string& host() const { return host_; }
  uint16_t kvEventsPort() const;
  uint16_t kvReplayPort() const;  // 0 without --kv-events-replay-port  // 0 when not publishing
  uint16_t port() const { return port_; }
  size_t index() const { return index_; }
  // "prefill", "decode" or "" (both).
  std::string role() const {
    return role_ == Role::kPrefill ? "prefill" : role_ == Role::kDecode ? "decode" : "";
  }

 private:
  struct RequestCtx;
  struct Inference;
  struct PdPlan;

  asio::awaitable<void> handle(http::Request& req, http::ResponseWriter& w);
  // GET /sim/recent: the last kRecent POSTs this worker took (path, X-Request-Id and the W3C
  // trace context headers, each cut to 256 bytes), newest last: what a test checks the gateway
  // sent an engine.
  struct Recent {
    std::string path, request_id, traceparent, tracestate;
  };
  static constexpr size_t kRecent = 64;
  std::deque<Recent> recent_;
  std::string recentJson() const;
  // The APIs of an inference request: /v1/completions, /v1/chat/completions, and the Anthropic
  // Messages API (/v1/messages: converted to its chat form as vLLM does, answered in its shape).
  // The OpenAI Responses API (/v1/responses) likewise, with vLLM's defaults: no response store
  // (previous_response_id: 404).
  enum class Api { kCompletions, kChat, kMessages, kResponses };
  asio::awaitable<void> handleInference(http::Request& req, http::ResponseWriter& w, Api api,
                                        const http::HeaderList& hdrs);
  // POST /v1/messages/count_tokens: the chat form's rendered length, as vLLM answers it.
  asio::awaitable<void> handleCountTokens(http::Request& req, http::ResponseWriter& w,
                                          const http::HeaderList& hdrs);
  // /tokenize and /detokenize in the engine's shape (vLLM; SGLang with --engine sglang).
  asio::awaitable<void> handleTokenize(http::Request& req, http::ResponseWriter& w,
                                       const http::HeaderList& hdrs, bool detokenize);
  // The pooling APIs (vLLM's /v1/embeddings, /rerank, /score, /classify, with their /v1 and
  // /v2 rerank aliases).
  enum class PoolingApi { kEmbeddings, kRerank, kScore, kClassify };
  asio::awaitable<void> handlePooling(http::Request& req, http::ResponseWriter& w,
                                      const http::HeaderList& hdrs, PoolingApi api);
  asio::awaitable<void> handleFault(http::Request& req, http::ResponseWriter& w);
  // POST /sim/cache_state: the true cache state of a prompt on every worker of the fleet.
  asio::awaitable<void> handleCacheState(http::Request& req, http::ResponseWriter& w);
  std::string metricsText() const;
  std::string modelsJson() const;
  nlohmann::ordered_json faultJson() const;
  Result<void> setFaults(const FaultState& next);
  Result<Inference> parseInference(const std::string& body, bool chat) const;
  // --responses-store: the Responses this worker answered, by id, as GET /v1/responses/{id}
  // returns them (vLLM keeps a finished response in memory unless "store": false), oldest
  // forgotten past 65536.
  std::unordered_map<std::string, std::string> stored_responses_;
  void storeResponse(const std::string& id, std::string body);
  asio::awaitable<void> handleStoredResponse(const std::string& id, bool cancel,
                                             http::ResponseWriter& w, const http::HeaderList& hdrs);
  std::deque<std::string> stored_order_;

  // Fault preamble of an inference request (fail_requests, stall_ms); false = already answered.
  asio::awaitable<bool> faultPreamble(RequestCtx& c, http::ResponseWriter& w,
                                      const http::HeaderList& hdrs);
  void abortRequest(http::ResponseWriter& w);  // client gone or stopping: count, hang up
  asio::awaitable<bool> sleepFor(RequestCtx& c, double ms);
  // P/D (pd_role.cc): checks a request against this worker's role and dialect; a decode pulls
  // its prefilled blocks (an SGLang decode waits for its room). An error is the answer (status,
  // message); `plan` says what to do.
  asio::awaitable<Result<void>> pdBegin(RequestCtx& c, const Inference& in,
                                        const std::string& request_id, PdPlan& plan);
  // The prefill is done: hold the prompt's blocks for the decode.
  void pdHold(RequestCtx& c, const Inference& in, const PdPlan& plan);
  // The pulled blocks arrive: transfer time, then they are in the rank's cache.
  asio::awaitable<bool> pdInstall(RequestCtx& c, const Inference& in, const PdPlan& plan);
  asio::awaitable<bool> acquireSlot(RequestCtx& c);
  void releaseSlot();
  // One data-parallel engine: its own prefix cache and KV-event publisher (--kv-events-dp-ranks;
  // one by default). A request is served by one rank, chosen round-robin.
  struct Rank {
    Rank(asio::io_context& io, const SimConfig& cfg, uint64_t seed)
        : cache(cfg.block_size, cfg.num_blocks),
          engine(cache, cfg.limits, cfg.step),
          timer(io),
          rng{seed} {}
    PrefixCache cache;
    BatchEngine engine;                // --timing step
    asio::steady_timer timer;          // the engine's step (or idle) wait
    bool idle = true;                  // waiting for work (a submit wakes it)
    SplitMix64 rng;                    // step jitter
    std::unique_ptr<KvPublisher> pub;  // set when cfg.kv_events.enabled
  };
  // --timing step: runs the rank's engine, one step per timer wait, until stop().
  asio::awaitable<void> runEngine(Rank& rank);
  // Waits until output token `tok` (0-based) exists; false when the request was aborted.
  asio::awaitable<bool> tokenReady(RequestCtx& c, int64_t tok);
  // Publishes the blocks of a sequence just admitted (KV events) and counts the prefix query.
  void admitted(Rank& rank, Seq& s);
  // A finished request's blocks completed during decode (prompt + generated ids), cached and
  // published like vLLM's (cfg.cache_decode).
  void cacheDecodeBlocks(Rank& rank, const std::string& model, const std::vector<uint32_t>& prompt,
                         size_t prompt_blocks_held, std::string_view generated);

  asio::io_context& io_;
  SimConfig cfg_;
  size_t index_;
  const Fleet* fleet_;
  http::Server server_;
  const Tokenizer& tokenizerFor(const std::string& model) const;
  std::vector<std::unique_ptr<Rank>> ranks_;
  size_t next_rank_ = 0;
  bool kvEvents() const { return cfg_.kv_events.enabled; }
  FaultState faults_;
  Role role_ = Role::kBoth;
  uint64_t pd_refused_ = 0;  // P/D requests refused (wrong leg, unknown or expired transfer)
  uint64_t pd_pulled_ = 0;   // decode: prefilled blocks pulled and installed
  std::string host_;
  uint16_t port_ = 0;
  bool stopping_ = false;
  int64_t created_ = 0;  // unix time the worker started (for /v1/models)

  size_t running_ = 0;               // concurrency slots held
  std::deque<RequestCtx*> waiters_;  // FIFO for a slot
  std::set<RequestCtx*> active_;     // every in-flight inference request

  uint64_t requests_total_ = 0;
  uint64_t tokenize_total_ = 0;  // /tokenize and /detokenize calls
  uint64_t requests_aborted_ = 0;
  uint64_t faults_injected_ = 0;
  uint64_t prefix_queries_ = 0;
  uint64_t prefix_hits_ = 0;
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  uint64_t request_success_ = 0;
  uint64_t steps_ = 0;     // engine steps run (all ranks)
  double slip_sum_s_ = 0;  // timer slip over those steps, simulated seconds
  double slip_max_s_ = 0;
};

}  // namespace kvgate::sim
