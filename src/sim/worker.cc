// A simulated vLLM worker: HTTP routing, concurrency slots (FIFO), prefill/decode timing over
// the block prefix cache, and the chat/completions handlers (SSE and not). Faults, /metrics,
// /v1/models and embeddings are in worker_admin.cc; vLLM wire helpers in wire.h.
#include "sim/worker.h"

#include <sys/socket.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/ids.h"
#include "common/json_depth.h"
#include "common/log.h"
#include "engines/anthropic_messages.h"
#include "engines/openai_responses.h"
#include "sim/request_ctx.h"
#include "sim/wire.h"

namespace kvgate::sim {
namespace {
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr std::array<const char*, 64> kWords = {
    "the",     "a",      "model",  "token",   "cache",  "block",  "prefix", "router",
    "gateway", "engine", "worker", "request", "stream", "batch",  "prompt", "reply",
    "fast",    "slow",   "warm",   "cold",    "quiet",  "bright", "simple", "steady",
    "river",   "stone",  "cloud",  "forest",  "garden", "bridge", "harbor", "meadow",
    "is",      "was",    "will",   "can",     "moves",  "holds",  "keeps",  "finds",
    "and",     "or",     "but",    "so",      "then",   "while",  "after",  "before",
    "one",     "two",    "three",  "four",    "many",   "few",    "every",  "some",
    "of",      "to",     "in",     "on",      "with",   "from",   "over",   "under"};

}  // namespace

static http::ServerOptions serverOptions(const SimConfig& cfg) {
  http::ServerOptions o;
  o.idle_timeout = std::chrono::milliseconds(cfg.keepalive_timeout_ms);
  return o;
}

namespace {
// vLLM's Responses errors (serving_responses.py: the {"error": {...}} shape).
std::string responsesError(int code, const std::string& message, const char* param) {
  const ojson err = {{"error",
                      {{"message", message},
                       {"type", "invalid_request_error"},
                       {"param", param ? ojson(param) : ojson(nullptr)},
                       {"code", code}}}};
  return dumpJson(err);
}

std::string responseNotFound(const std::string& id) {
  return responsesError(404, "Response with id '" + id + "' not found.", "response_id");
}
}  // namespace

Worker::Worker(asio::io_context& io, const SimConfig& cfg, size_t index, const Fleet* fleet)
    : io_(io),
      cfg_(cfg),
      index_(index),
      fleet_(fleet),
      server_(
          io, [this](http::Request& r, http::ResponseWriter& w) { return handle(r, w); },
          serverOptions(cfg)),
      faults_(cfg.faults),
      created_(unixNow()) {
  if (cfg_.tls) server_.setTls(cfg_.tls);
  if (cfg_.models.empty()) cfg_.models.push_back("sim-model");
  if (cfg_.speedup <= 0) cfg_.speedup = 1.0;
  if (cfg_.max_concurrency == 0) cfg_.max_concurrency = 1;
  if (!cfg_.roles.empty()) {
    const std::string& r = cfg_.roles[index_ % cfg_.roles.size()];
    role_ = r == "prefill" ? Role::kPrefill : r == "decode" ? Role::kDecode : Role::kBoth;
  }
  const int ranks = std::max(1, cfg_.kv_events.trtllm ? 1 : cfg_.kv_events.dp_ranks);
  for (int r = 0; r < ranks; ++r) {
    auto rank = std::make_unique<Rank>(
        io_, cfg_, cfg_.seed * 0x9E3779B97F4A7C15ULL ^ (index_ << 8) ^ static_cast<uint64_t>(r));
    if (cfg_.kv_events.enabled) {
      rank->pub =
          std::make_unique<KvPublisher>(cfg_.kv_events, cfg_.block_size, cfg_.kv_hash_seed, r);
      KvPublisher* pub = rank->pub.get();
      rank->cache.onEvict([pub](uint64_t key) { pub->evicted(key); });
    }
    ranks_.push_back(std::move(rank));
  }
  if (!cfg_.fixed_timing)
    for (auto& rank : ranks_) asio::co_spawn(io_, runEngine(*rank), asio::detached);
}

uint16_t Worker::kvEventsPort() const { return ranks_[0]->pub ? ranks_[0]->pub->port() : 0; }
uint16_t Worker::kvReplayPort() const { return ranks_[0]->pub ? ranks_[0]->pub->replayPort() : 0; }

Worker::~Worker() = default;

const Tokenizer& Worker::tokenizerFor(const std::string& model) const {
  static const SimpleTokenizer stand_in;
  auto it = cfg_.tokenizers.find(model);
  return it != cfg_.tokenizers.end() && it->second ? *it->second : stand_in;
}

Result<uint16_t> Worker::listen(const std::string& host, uint16_t port) {
  auto r = server_.listen(host, port);
  if (r) {
    host_ = host;
    port_ = *r;
    // Rank r publishes on the worker's event port + r (replay port + r), as vLLM's DP ranks do;
    // with several workers on one address (no --hosts), worker i's ports start at port + i * ranks.
    const size_t n = ranks_.size();
    for (size_t r = 0; r < n; ++r) {
      KvPublisher* pub = ranks_[r]->pub.get();
      if (!pub || pub->port() != 0 || cfg_.kv_events.trtllm) continue;
      auto portOf = [&](uint16_t base) -> uint16_t {
        if (base == 0) return 0;
        return static_cast<uint16_t>(base + (cfg_.kv_events.same_port ? 0 : index_ * n) + r);
      };
      if (auto b = pub->bind(host, portOf(cfg_.kv_events.port)); !b)
        return tl::unexpected(b.error());
      if (cfg_.kv_events.replay) {
        if (auto b = pub->bindReplay(host, portOf(cfg_.kv_events.replay_port)); !b)
          return tl::unexpected(b.error());
      }
    }
  }
  return r;
}

void Worker::unlisten() { server_.pauseAccepting(); }

Result<void> Worker::applyInitialFaults() {
  if (faults_.refuse_connections) server_.pauseAccepting();
  return {};
}

void Worker::stop() {
  stopping_ = true;
  server_.stop();
  for (RequestCtx* c : active_) c->timer.cancel();
  for (auto& rank : ranks_) rank->timer.cancel();
}

namespace {
// A Gaussian factor of standard deviation sd, clamped to [0.3, 1.7] (the llm-d simulator's
// convention), from two uniform draws (Box-Muller).
double jitterFactor(SplitMix64& rng, double sd) {
  if (sd <= 0) return 1.0;
  const double u1 = rng.uniform(), u2 = rng.uniform();
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  return std::clamp(1.0 + sd * z, 0.3, 1.7);
}
}  // namespace

asio::awaitable<void> Worker::runEngine(Rank& rank) {
  using Clock = std::chrono::steady_clock;
  while (!stopping_) {
    StepPlan plan = rank.engine.plan();
    error_code ec;
    if (plan.empty()) {  // nothing runnable: sleep until a request arrives
      rank.idle = true;
      rank.timer.expires_at(Clock::time_point::max());
      co_await rank.timer.async_wait(useEc(ec));
      rank.idle = false;
      continue;
    }
    const double ms = plan.ms * jitterFactor(rank.rng, cfg_.jitter);
    const auto deadline =
        Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(ms * 1e6 / cfg_.speedup));
    rank.timer.expires_at(deadline);
    co_await rank.timer.async_wait(useEc(ec));
    if (stopping_) co_return;
    // Simulated seconds the step overran (the timer fired late: a busy machine).
    const double slip =
        std::max(0.0, std::chrono::duration<double>(Clock::now() - deadline).count()) *
        cfg_.speedup;
    slip_sum_s_ += slip;
    slip_max_s_ = std::max(slip_max_s_, slip);
    ++steps_;
    rank.engine.finish(plan);
  }
}

void Worker::admitted(Rank& rank, Seq& s) {
  if (KvPublisher* pub = rank.pub.get()) {  // one batch per admission: evictions, then the store
    // vLLM's full report mode re-sends the blocks a request reuses, from block 0.
    const size_t first = cfg_.kv_events.full_report ? 0 : s.alloc.cached_tokens / cfg_.block_size;
    pub->stored(s.prompt, s.alloc.keys, first,
                s.alloc.keys.size() > first ? s.alloc.keys.size() - first : 0);
    pub->flush();
  }
  if (s.preemptions > 0) return;  // a readmission: its prompt was counted when first admitted
  prefix_queries_ += s.prompt.size();
  prefix_hits_ += s.computed;  // the hit, capped as vLLM caps it
}

asio::awaitable<bool> Worker::tokenReady(RequestCtx& c, int64_t tok) {
  if (cfg_.fixed_timing) {
    if (tok == 0) co_return !c.aborted();  // the first token follows the prefill wait
    co_return co_await sleepFor(c, cfg_.itl_ms);
  }
  while (c.seq->generated <= tok) {
    if (c.aborted()) co_return false;
    c.timer.expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    c.awaiting_token = true;
    co_await c.timer.async_wait(useEc(ec));  // the engine cancels it when a token is out
    c.awaiting_token = false;
  }
  co_return !c.aborted();
}

asio::awaitable<bool> Worker::sleepFor(RequestCtx& c, double ms) {
  if (c.aborted()) co_return false;
  if (ms <= 0) co_return true;
  auto ns = static_cast<int64_t>(ms * 1e6 / cfg_.speedup);
  if (ns > 0) {
    c.timer.expires_after(std::chrono::nanoseconds(ns));
    error_code ec;
    co_await c.timer.async_wait(useEc(ec));
  }
  co_return !c.aborted();
}

asio::awaitable<bool> Worker::acquireSlot(RequestCtx& c) {
  if (c.aborted()) co_return false;
  if (running_ < cfg_.max_concurrency && waiters_.empty()) {
    ++running_;
    c.granted = true;
    co_return true;
  }
  waiters_.push_back(&c);
  c.queued = true;
  while (!c.granted) {
    if (c.aborted()) co_return false;  // the destructor leaves the queue
    c.timer.expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    co_await c.timer.async_wait(useEc(ec));
  }
  co_return !c.aborted();
}

void Worker::cacheDecodeBlocks(Rank& rank, const std::string& model,
                               const std::vector<uint32_t>& prompt, size_t prompt_blocks_held,
                               std::string_view generated) {
  if (!cfg_.cache_decode || generated.empty()) return;
  const size_t bs = cfg_.block_size;
  std::vector<uint32_t> full = prompt;
  const std::vector<uint32_t> gen = tokenizerFor(model).encode(generated, false);
  full.insert(full.end(), gen.begin(), gen.end());
  if (full.size() / bs <= prompt.size() / bs) return;  // no block completed during decode
  // The prompt's blocks are still held by the request: only the decode blocks are new.
  PrefixCache::Allocation ext = rank.cache.acquire(full);
  if (KvPublisher* kv_pub_ = rank.pub.get()) {
    // From the first block the request did not already hold and publish: a prompt whose
    // allocation stopped early (cache full) gets its remaining blocks published here too, so no
    // decode block names a parent the subscriber never saw.
    const size_t first = std::min(prompt_blocks_held, ext.cached_tokens / bs);
    if (ext.keys.size() > first) kv_pub_->stored(full, ext.keys, first, ext.keys.size() - first);
    kv_pub_->flush();
  }
  rank.cache.release(ext);
}

void Worker::releaseSlot() {
  if (waiters_.empty()) {
    if (running_ > 0) --running_;
    return;
  }
  RequestCtx* next = waiters_.front();  // hand the slot over: running_ stays the same
  waiters_.pop_front();
  next->queued = false;
  next->granted = true;
  next->timer.cancel();
}

void Worker::abortRequest(http::ResponseWriter& w) {
  if (!stopping_) ++requests_aborted_;
  hangUp(w);  // nothing more will be written; the server sees a closed socket
}

asio::awaitable<bool> Worker::faultPreamble(RequestCtx& c, http::ResponseWriter& w,
                                            const http::HeaderList& hdrs) {
  bool fail = faults_.fail_requests > 0;
  int status = faults_.fail_status;
  if (fail) {
    --faults_.fail_requests;
    ++faults_injected_;
  }
  if (faults_.stall_ms > 0) {
    ++faults_injected_;
    if (!co_await sleepFor(c, static_cast<double>(faults_.stall_ms))) {
      abortRequest(w);
      co_return false;
    }
  }
  if (fail) {
    co_await w.send(status, "application/json",
                    vllmError(status, "Simulated failure injected by kvgate sim (fail_requests)."),
                    hdrs);
    co_return false;
  }
  co_return true;
}

Result<Worker::Inference> Worker::parseInference(const std::string& body, bool chat) const {
  if (!jsonDepthWithin(body)) return fail(400, "", "Request body is nested too deeply.");
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return fail(400, "", "Request body is not valid JSON.");
  if (!j.is_object()) return fail(400, "", "Request body must be a JSON object.");
  Inference in;
  in.model = cfg_.models.front();
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string()) return fail(400, "model", "'model' must be a string.");
    in.model = m->get<std::string>();
    if (std::find(cfg_.models.begin(), cfg_.models.end(), in.model) == cfg_.models.end())
      return fail(404, "model", "The model `" + in.model + "` does not exist.");
  }
  if (chat) {
    auto m = j.find("messages");
    if (m == j.end() || !m->is_array() || m->empty())
      return fail(400, "", "'messages' must be a non-empty array.");
    for (const auto& msg : *m) {
      if (!msg.is_object()) return fail(400, "", "Each message must be an object.");
      auto role = msg.find("role");
      if (role == msg.end() || !role->is_string())
        return fail(400, "", "Each message needs a string 'role'.");
      auto c = msg.find("content");
      if (c != msg.end() && !c->is_string() && !c->is_array() && !c->is_null())
        return fail(400, "", "Message 'content' must be a string or an array of parts.");
    }
    auto ids = tokenizerFor(in.model).encodeChat(body, j);
    if (!ids) return fail(400, "messages", ids.error().what);
    in.prompt = std::move(*ids);
  } else {
    auto p = j.find("prompt");
    if (p == j.end() || p->is_null()) return fail(400, "", "'prompt' is required.");
    const json* one = &*p;
    if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
      one = &(*p)[0];     // a batch of one prompt
    bool special = true;  // vLLM CompletionRequest.add_special_tokens
    if (auto a = j.find("add_special_tokens"); a != j.end() && !a->is_null()) {
      if (!a->is_boolean())
        return fail(400, "add_special_tokens", "'add_special_tokens' must be a boolean.");
      special = a->get<bool>();
    }
    if (one->is_string()) {
      in.prompt = tokenizerFor(in.model).encode(one->get_ref<const std::string&>(), special);
    } else if (one->is_array() && tokenList(*one, in.prompt)) {
    } else if (p->is_array() && p->size() > 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
      return fail(400, "",
                  "Batched prompts (" + std::to_string(p->size()) +
                      " prompts) are not supported by the simulator; send one prompt "
                      "per request.");
    } else {
      return fail(400, "",
                  "'prompt' must be a string, a list of token ids, or a list with one prompt.");
    }
  }
  if (in.prompt.empty()) return fail(400, "", "The prompt cannot be empty.");
  in.max_tokens = -1;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!chat && std::string_view(key) == "max_completion_tokens") continue;
    auto v = j.find(key);
    if (v == j.end() || v->is_null()) continue;
    int64_t x = 0;
    if (!getInt(*v, 1, cfg_.max_model_len, x))
      return fail(400, key,
                  std::string(key) + " must be an integer in 1.." +
                      std::to_string(cfg_.max_model_len) + ".");
    in.max_tokens = x;  // max_completion_tokens (read last) wins, as in vLLM
  }
  auto plen = static_cast<int64_t>(in.prompt.size());
  if (in.max_tokens < 0)
    in.max_tokens =
        std::max<int64_t>(1, std::min(cfg_.default_max_tokens, cfg_.max_model_len - plen));
  if (plen + in.max_tokens > cfg_.max_model_len) {
    return fail(400, "",
                "This model's maximum context length is " + std::to_string(cfg_.max_model_len) +
                    " tokens. However, you requested " + std::to_string(plen + in.max_tokens) +
                    " tokens (" + std::to_string(plen) + " in the messages, " +
                    std::to_string(in.max_tokens) +
                    " in the completion). Please reduce the length of the messages or "
                    "completion.");
  }
  if (auto n = j.find("n"); n != j.end() && !n->is_null() && *n != 1)
    return fail(400, "n", "The simulator supports only n=1.");
  if (auto s = j.find("stream"); s != j.end() && !s->is_null()) {
    if (!s->is_boolean()) return fail(400, "stream", "'stream' must be a boolean.");
    in.stream = s->get<bool>();
  }
  if (auto so = j.find("stream_options"); so != j.end() && !so->is_null()) {
    if (!in.stream)
      return fail(400, "stream_options", "Stream options can only be defined when `stream=True`.");
    if (!so->is_object()) return fail(400, "stream_options", "'stream_options' must be an object.");
    if (auto iu = so->find("include_usage"); iu != so->end() && iu->is_boolean())
      in.include_usage = iu->get<bool>();
  }
  for (auto [key, field] : {std::pair{"kv_transfer_params", &in.kv_transfer_params},
                            std::pair{"bootstrap_host", &in.bootstrap_host},
                            {"bootstrap_port", &in.bootstrap_port},
                            {"bootstrap_room", &in.bootstrap_room},
                            {"disaggregated_params", &in.disaggregated_params}})
    if (auto f = j.find(key); f != j.end()) *field = *f;
  return in;
}

namespace {
// vLLM's error type names, which its Anthropic router puts in the Anthropic error shape.
const char* vllmErrorType(int code) {
  switch (code) {
    case 404:
      return "NotFoundError";
    case 422:
      return "UnprocessableEntityError";
    case 501:
      return "NotImplementedError";
    default:
      return code >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

// The chat-completions body vLLM builds from a Messages request (engines/anthropic_messages.h),
// with the fields the simulator reads; an error in vLLM's validation shape (OpenAI's) when the
// body is not a Messages request.
Result<std::string> messagesAsChat(const std::string& body, bool count_tokens) {
  engines::anthropic::ChatForm parsed;
  const auto j = engines::anthropic::parseObject(body, parsed);  // (one parse, no exception)
  if (!j) return fail(400, "", parsed.error);
  const auto form = engines::anthropic::toChatForm(*j, count_tokens);
  if (!form.ok) return fail(400, "", form.error);
  nlohmann::ordered_json chat = form.chat;
  // (kv_transfer_params too: vLLM's Messages request carries them into the chat request for P/D
  // since vLLM PR 37535; SGLang's and TensorRT-LLM's conversions drop their P/D fields)
  for (const char* key : {"model", "max_tokens", "stream", "kv_transfer_params"}) {
    if (count_tokens && std::string_view(key) != "model") continue;  // (ignored there)
    if (auto it = j->find(key); it != j->end()) chat[key] = *it;
  }
  return chat.dump();
}

// The chat-completions body vLLM builds from a Responses request (engines/openai_responses.h):
// its chat form, the model, max_output_tokens as max_tokens, stream.
// (a continuation of a stored response: the simulator renders the new input alone, without the
// stored history vLLM would put before it)
Result<std::string> responsesAsChat(const std::string& body) {
  engines::responses::ChatForm parsed;
  auto j = engines::anthropic::parseObject(body, parsed);
  if (!j) return fail(400, "", parsed.error);
  j->erase("previous_response_id");
  const auto form = engines::responses::toChatForm(*j);
  if (!form.ok) return fail(400, "", form.error);
  nlohmann::ordered_json chat = form.chat;
  if (auto it = j->find("model"); it != j->end()) chat["model"] = *it;
  if (auto it = j->find("max_output_tokens"); it != j->end()) chat["max_tokens"] = *it;
  if (auto it = j->find("stream"); it != j->end()) chat["stream"] = *it;
  return chat.dump();
}
}  // namespace

asio::awaitable<void> Worker::handleCountTokens(http::Request& req, http::ResponseWriter& w,
                                                const http::HeaderList& hdrs) {
  auto chat = messagesAsChat(req.body, true);
  auto parsed = chat ? parseInference(*chat, true) : tl::unexpected(chat.error());
  if (!parsed) {
    const Error& e = parsed.error();
    co_await w.send(e.code, "application/json",
                    chat ? engines::anthropic::errorBody(vllmErrorType(e.code), e.what)
                         : vllmError(e.code, e.what),
                    hdrs);
    co_return;
  }
  const std::string n = std::to_string(parsed->prompt.size());
  co_await w.send(
      200, "application/json",
      "{\"input_tokens\":" + n + ",\"context_management\":{\"original_input_tokens\":" + n + "}}",
      hdrs);
}

asio::awaitable<void> Worker::handleInference(http::Request& req, http::ResponseWriter& w, Api api,
                                              const http::HeaderList& hdrs) {
  ++requests_total_;
  RequestCtx ctx(*this, w.socket());
  if (!co_await faultPreamble(ctx, w, hdrs)) co_return;
  const int64_t close_after = faults_.close_mid_stream_after;
  const double event_delay = static_cast<double>(faults_.event_delay_ms);
  const bool chat = api != Api::kCompletions;
  const bool messages = api == Api::kMessages;
  // An error answer in the API's shape (the Messages API: Anthropic's, with vLLM's type names).
  auto errorBody = [messages](const Error& e) {
    return messages ? engines::anthropic::errorBody(vllmErrorType(e.code), e.what)
                    : vllmError(e.code, e.what, e.source.empty() ? nullptr : e.source.c_str());
  };
  const bool responses = api == Api::kResponses;
  std::string chosen_id;  // vLLM's request_id: the response's id when the client names one
  bool store = cfg_.responses_store;  // (vLLM: kept when done unless "store": false)
  if (responses) {  // vLLM without VLLM_ENABLE_RESPONSES_API_STORE keeps no response
    const auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_object() && j.contains("request_id") && j["request_id"].is_string())
      chosen_id = j["request_id"].get<std::string>();
    if (j.is_object() && j.contains("store") && j["store"].is_boolean() && !j["store"].get<bool>())
      store = false;
    if (j.is_object() && j.contains("previous_response_id") &&
        j["previous_response_id"].is_string() &&
        !(cfg_.responses_store &&
          stored_responses_.count(j["previous_response_id"].get<std::string>()))) {
      const std::string id = j["previous_response_id"].get<std::string>();
      co_await w.send(404, "application/json", responseNotFound(id), hdrs);
      co_return;
    }
  }
  Result<std::string> as_chat = messages    ? messagesAsChat(req.body, false)
                                : responses ? responsesAsChat(req.body)
                                            : std::string();
  if (!as_chat) {  // (vLLM's request validation answers in its OpenAI shape)
    co_await w.send(400, "application/json", vllmError(400, as_chat.error().what), hdrs);
    co_return;
  }
  auto parsed = parseInference(messages || responses ? *as_chat : req.body, chat);
  if (!parsed) {
    co_await w.send(parsed.error().code, "application/json", errorBody(parsed.error()), hdrs);
    co_return;
  }
  const Inference& in = *parsed;
  std::string base = hdrs.empty() ? newRequestId() : hdrs.front().second;  // vLLM: X-Request-Id
  PdPlan plan;
  if (role_ != Role::kBoth) {  // a P/D leg: checked against this worker's role and dialect
    auto ok = co_await pdBegin(ctx, in, base, plan);
    if (!ok) {
      ++pd_refused_;
      if (ctx.aborted()) {
        abortRequest(w);
        co_return;
      }
      co_await w.send(ok.error().code, "application/json",
                      vllmError(ok.error().code, ok.error().what,
                                ok.error().source.empty() ? nullptr : ok.error().source.c_str()),
                      hdrs);
      co_return;
    }
  }
  const std::string id = !chosen_id.empty() ? chosen_id
                                            : (responses ? "resp_"
                                               : chat    ? "chatcmpl-"
                                                         : "cmpl-") +
                                                  base;
  // The Responses API's objects (vLLM's ResponsesResponse and its output message).
  const std::string msg_id = "msg_" + base;
  auto responsesUsage = [&](int64_t plen_, int64_t ntok_, int64_t cached_) {
    return ojson{{"input_tokens", plen_},
                 {"input_tokens_details", {{"cached_tokens", cached_}}},
                 {"output_tokens", ntok_},
                 {"output_tokens_details", {{"reasoning_tokens", 0}}},
                 {"total_tokens", plen_ + ntok_}};
  };
  auto responsesPart = [](const std::string& text) {
    return ojson{{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()}};
  };
  auto responsesItem = [&](const std::string& text, bool done) {
    return ojson{{"id", msg_id},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"status", done ? "completed" : "in_progress"},
                 {"content", done ? ojson::array({responsesPart(text)}) : ojson::array()}};
  };
  // (the simulator stops at max tokens, finish reason length: vLLM's status "incomplete")
  auto responsesObject = [&](const char* status, ojson output, ojson usage) {
    ojson r = {{"id", id},
               {"object", "response"},
               {"created_at", unixNow()},
               {"model", in.model},
               {"status", status},
               {"output", std::move(output)},
               {"tools", ojson::array()},
               {"usage", std::move(usage)}};
    if (std::string_view(status) == "incomplete")
      r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    return r;
  };

  const int64_t created = unixNow();
  const auto plen = static_cast<int64_t>(in.prompt.size());
  const int64_t ntok = role_ == Role::kPrefill ? 1 : in.max_tokens;  // prefill: one token
  SplitMix64 rng{cfg_.seed * 0x9E3779B97F4A7C15ULL ^
                 XXH3_64bits(in.prompt.data(), in.prompt.size() * sizeof(uint32_t))};
  auto nextToken = [&rng](int64_t i) {
    return std::string(i == 0 ? "" : " ") + kWords[rng.next() % kWords.size()];
  };

  if (!cfg_.fixed_timing) {  // never fits the rank's KV cache: refused before any header
    const Rank& any = *ranks_[next_rank_ % ranks_.size()];
    if (any.engine.blocksFor(static_cast<size_t>(plen + ntok)) > any.cache.capacity()) {
      const std::string msg = "The request needs " + std::to_string(plen + ntok) +
                              " tokens of KV cache but the engine holds " +
                              std::to_string(any.cache.capacity() * cfg_.block_size) + ".";
      co_await w.send(400, "application/json", errorBody(Error{400, "", false, msg}), hdrs);
      co_return;
    }
  }
  if (in.stream) {
    if (!co_await w.beginStream(200, "text/event-stream", hdrs)) {
      abortRequest(w);
      co_return;
    }
    if (close_after == 0) {  // fault: headers only
      ++faults_injected_;
      hangUp(w);
      co_return;
    }
  }
  const auto bs = static_cast<int64_t>(cfg_.block_size);
  int64_t cached = 0;
  ctx.rank = next_rank_++ % ranks_.size();
  Rank& rank = *ranks_[ctx.rank];
  if (plan.transfer_blocks > 0 && !co_await pdInstall(ctx, in, plan)) {
    abortRequest(w);
    co_return;
  }
  if (cfg_.fixed_timing) {
    if (!co_await acquireSlot(ctx)) {
      abortRequest(w);
      co_return;
    }
    ctx.alloc = rank.cache.acquire(in.prompt);
    ctx.has_alloc = true;
    if (KvPublisher* kv_pub_ = rank.pub.get()) {  // one batch per admitted request: evictions
                                                  // (collected above), then the store
      // vLLM's full report mode re-sends the blocks a request reuses, from block 0.
      const size_t first =
          cfg_.kv_events.full_report ? 0 : ctx.alloc.cached_tokens / cfg_.block_size;
      kv_pub_->stored(in.prompt, ctx.alloc.keys, first,
                      ctx.alloc.keys.size() > first ? ctx.alloc.keys.size() - first : 0);
      kv_pub_->flush();
    }
    // vLLM caps a hit at num_tokens - 1 (the last prompt token is always recomputed to produce
    // logits), rounded down to whole blocks: a fully cached 32-token prompt reports 16 cached.
    const int64_t max_hit = plen > 0 ? ((plen - 1) / bs) * bs : 0;
    cached = std::min(static_cast<int64_t>(ctx.alloc.cached_tokens), max_hit);
    prefix_queries_ += static_cast<uint64_t>(plen);
    prefix_hits_ += static_cast<uint64_t>(cached);
    double prefill_ms =
        cfg_.prefill_base_ms + static_cast<double>(plen - cached) * cfg_.prefill_us_per_token / 1e3;
    if (!co_await sleepFor(ctx, prefill_ms)) {
      abortRequest(w);
      co_return;
    }
  } else {
    if (!co_await sleepFor(ctx, cfg_.api_ms)) {
      abortRequest(w);
      co_return;
    }
    auto seq = std::make_shared<Seq>();
    seq->prompt = in.prompt;
    seq->keys = rank.cache.blockKeys(in.prompt);
    seq->max_tokens = ntok;
    RequestCtx* c = &ctx;  // the context clears these before it goes
    seq->wake = [c] {      // only a token wait is ended: a fault's sleep runs its course
      if (c->awaiting_token) c->timer.cancel();
    };
    seq->on_admit = [this, &rank](Seq& s) { admitted(rank, s); };
    if (!rank.engine.submit(seq)) {  // refused above, before any header: cannot happen here
      abortRequest(w);
      co_return;
    }
    ctx.seq = seq;
    if (rank.idle) rank.timer.cancel();  // wake the engine
    if (!co_await tokenReady(ctx, 0)) {
      abortRequest(w);
      co_return;
    }
    cached = static_cast<int64_t>(seq->cached_tokens);
  }
  if (!plan.hold_key.empty()) pdHold(ctx, in, plan);  // prefilled: the decode may pull now
  prompt_tokens_ += static_cast<uint64_t>(plen);
  const std::string usage =
      "{\"prompt_tokens\":" + std::to_string(plen) +
      ",\"completion_tokens\":" + std::to_string(ntok) +
      ",\"total_tokens\":" + std::to_string(plen + ntok) +
      ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(cached) + "}}";

  if (!in.stream) {
    std::string text;
    for (int64_t i = 0; i < ntok; ++i) {
      if (!co_await tokenReady(ctx, i)) {
        abortRequest(w);
        co_return;
      }
      ++generation_tokens_;
      text += nextToken(i);
    }
    cacheDecodeBlocks(rank, in.model, in.prompt,
                      ctx.seq ? ctx.seq->keys.size() : ctx.alloc.keys.size(), text);
    std::string body;
    if (responses) {
      body = dumpJson(responsesObject("incomplete", ojson::array({responsesItem(text, true)}),
                                      responsesUsage(plen, ntok, cached)));
      if (store) storeResponse(id, body);
    } else if (messages) {  // vLLM's messages_full_converter: the chat id, the text block, usage
      ojson resp = {{"id", id},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"content", ojson::array({{{"type", "text"}, {"text", text}}})},
                    {"model", in.model},
                    {"stop_reason", "max_tokens"},
                    {"stop_sequence", nullptr},
                    {"usage", {{"input_tokens", plen}, {"output_tokens", ntok}}}};
      if (!plan.answer_params.is_null() && cfg_.engine == "vllm")
        resp["kv_transfer_params"] = plan.answer_params;  // (vLLM's Messages response, P/D)
      body = dumpJson(resp);
    } else {
      ojson choice = {{"index", 0}};
      if (chat)
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      else
        choice["text"] = text;
      choice["finish_reason"] = "length";
      choice["logprobs"] = nullptr;
      if (!plan.answer_params.is_null() && cfg_.engine == "trtllm")
        choice["disaggregated_params"] = plan.answer_params;
      ojson resp = {{"id", id},
                    {"object", chat ? "chat.completion" : "text_completion"},
                    {"created", created},
                    {"model", in.model},
                    {"choices", ojson::array({choice})},
                    {"usage", ojson::parse(usage)}};
      if (!plan.answer_params.is_null() && cfg_.engine == "vllm")
        resp["kv_transfer_params"] = plan.answer_params;
      body = dumpJson(resp);
    }
    if (close_after >= 0) {  // fault: headers only, then close
      ++faults_injected_;
      std::string head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n";
      for (const auto& [k, v] : hdrs) head += k + ": " + v + "\r\n";
      head += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
      co_await w.writeRaw(head);
      hangUp(w);
      co_return;
    }
    if (!co_await w.send(200, "application/json", body, hdrs)) {
      abortRequest(w);
      co_return;
    }
    ++request_success_;
    co_return;
  }

  // Streaming: [role chunk (chat)], one chunk per token, [usage chunk], [DONE].
  const std::string usage_null = in.include_usage ? ",\"usage\":null" : "";
  const std::string head = "{\"id\":\"" + http::jsonEscape(id) + "\",\"object\":\"" +
                           (chat ? "chat.completion.chunk" : "text_completion") +
                           "\",\"created\":" + std::to_string(created) + ",\"model\":\"" +
                           http::jsonEscape(in.model) + "\",\"choices\":[";
  // Messages (vLLM's message_stream_converter): message_start, content_block_start, a
  // content_block_delta per token, content_block_stop, message_delta (stop reason, usage),
  // message_stop; each `event: <type>` then `data: <json>`.
  // Responses (vLLM's stream): response.created, response.in_progress,
  // response.output_item.added, response.content_part.added, a response.output_text.delta per
  // token, response.output_text.done, response.content_part.done, response.output_item.done,
  // response.completed (with the usage); each with its sequence_number.
  const int64_t first_tok = responses ? 4 : messages ? 2 : chat ? 1 : 0;
  const int64_t total = responses  ? first_tok + ntok + 4
                        : messages ? first_tok + ntok + 3
                                   : first_tok + ntok + (in.include_usage ? 1 : 0) + 1;
  std::string streamed;  // (Responses: the text so far, for the done events)
  const std::string usage_in = "{\"input_tokens\":" + std::to_string(plen);
  std::string generated;  // for the decode blocks (cfg.cache_decode)
  if (event_delay > 0) ++faults_injected_;
  for (int64_t e = 0; e < total; ++e) {
    const int64_t tok = e - first_tok;
    const bool is_token = tok >= 0 && tok < ntok;
    if (close_after >= 0 && e >= close_after) {  // fault: cut the stream, no terminating chunk
      ++faults_injected_;
      hangUp(w);
      co_return;
    }
    if (e > 0 && event_delay > 0 && !co_await sleepFor(ctx, event_delay)) {
      abortRequest(w);
      co_return;
    }
    if (is_token && !co_await tokenReady(ctx, tok)) {
      abortRequest(w);
      co_return;
    }
    std::string ev;
    if (responses) {
      auto event = [&ev, e](const char* type, ojson data) {
        ojson j = {{"type", type}, {"sequence_number", e}};
        for (auto it = data.begin(); it != data.end(); ++it) j[it.key()] = it.value();
        ev = std::string("event: ") + type + "\ndata: " + dumpJson(j);
      };
      const ojson at = {{"item_id", msg_id}, {"output_index", 0}, {"content_index", 0}};
      auto with = [&at](ojson extra) {
        ojson j = at;
        for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
        return j;
      };
      if (tok == -4) {
        event("response.created",
              {{"response", responsesObject("in_progress", ojson::array(), nullptr)}});
      } else if (tok == -3) {
        event("response.in_progress",
              {{"response", responsesObject("in_progress", ojson::array(), nullptr)}});
      } else if (tok == -2) {
        event("response.output_item.added",
              {{"output_index", 0}, {"item", responsesItem("", false)}});
      } else if (tok == -1) {
        event("response.content_part.added", with({{"part", responsesPart("")}}));
      } else if (is_token) {
        ++generation_tokens_;
        const std::string word = nextToken(tok);
        streamed += word;
        if (cfg_.cache_decode) generated += word;
        event("response.output_text.delta", with({{"delta", word}, {"logprobs", ojson::array()}}));
      } else if (tok == ntok) {
        event("response.output_text.done",
              with({{"text", streamed}, {"logprobs", ojson::array()}}));
      } else if (tok == ntok + 1) {
        event("response.content_part.done", with({{"part", responsesPart(streamed)}}));
      } else if (tok == ntok + 2) {
        event("response.output_item.done",
              {{"output_index", 0}, {"item", responsesItem(streamed, true)}});
      } else {
        ojson done = responsesObject("incomplete", ojson::array({responsesItem(streamed, true)}),
                                     responsesUsage(plen, ntok, cached));
        if (store) storeResponse(id, dumpJson(done));
        event("response.completed", {{"response", std::move(done)}});
      }
    } else if (messages) {
      auto event = [&ev](const char* type, const std::string& data) {
        ev = std::string("event: ") + type + "\ndata: " + data;
      };
      if (tok == -2) {
        event("message_start",
              "{\"type\":\"message_start\",\"message\":{\"id\":\"" + http::jsonEscape(id) +
                  "\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"" +
                  http::jsonEscape(in.model) +
                  "\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":" + usage_in +
                  (cfg_.anthropic_usage ? ",\"output_tokens\":1}}}" : ",\"output_tokens\":0}}}"));
      } else if (tok == -1) {
        event("content_block_start",
              "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":"
              "\"text\",\"text\":\"\"}}");
      } else if (is_token) {
        ++generation_tokens_;
        const std::string word = nextToken(tok);
        if (cfg_.cache_decode) generated += word;
        event("content_block_delta",
              "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
              "\"text\":\"" +
                  http::jsonEscape(word) + "\"}}");
      } else if (tok == ntok) {
        event("content_block_stop", "{\"type\":\"content_block_stop\",\"index\":0}");
      } else if (tok == ntok + 1) {
        event("message_delta",
              "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\","
              "\"stop_sequence\":null},\"usage\":" +
                  (cfg_.anthropic_usage ? std::string("{") : usage_in + ",") +
                  "\"output_tokens\":" + std::to_string(ntok) + "}}");
      } else {
        event("message_stop", "{\"type\":\"message_stop\"}");
      }
    } else {
      ev = "data: ";
      if (tok < 0) {
        ev += head +
              "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
              "\"logprobs\":null,\"finish_reason\":null}]" +
              usage_null + "}";
      } else if (is_token) {
        ++generation_tokens_;
        ev += head + (chat ? "{\"index\":0,\"delta\":{\"content\":\"" : "{\"index\":0,\"text\":\"");
        const std::string word = nextToken(tok);
        if (cfg_.cache_decode) generated += word;
        ev += http::jsonEscape(word);
        ev += chat ? "\"}" : "\"";
        ev += ",\"logprobs\":null,\"finish_reason\":";
        ev += tok == ntok - 1 ? "\"length\"" : "null";
        ev += "}]" + usage_null;
        if (cfg_.stamp_events) {  // benchmark aid: wall-clock send time for relay-delay figures
          ev += ",\"kvgate_sent_us\":";
          ev += std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
        }
        ev += "}";
      } else if (tok == ntok && in.include_usage) {
        ev += head + "],\"usage\":" + usage + "}";
      } else {
        ev += "[DONE]";
      }
    }
    ev += "\n\n";
    // (after the event carrying the usage: an output count alone and a nested usage, neither a
    // usage the gateway may take over the real one)
    if (cfg_.unknown_events && ((responses && e == total - 1) || (messages && tok == ntok + 1))) {
      const std::string type = responses ? "response.kvgate_sim_unknown" : "kvgate_sim_unknown";
      ev += "event: " + type + "\ndata: {\"type\":\"" + type +
            "\",\"usage\":{\"output_tokens\":1},\"detail\":{\"usage\":{\"total_tokens\":1}}}\n\n";
    }
    if (!co_await w.writeChunk(ev)) {
      abortRequest(w);
      co_return;
    }
  }
  cacheDecodeBlocks(rank, in.model, in.prompt,
                    ctx.seq ? ctx.seq->keys.size() : ctx.alloc.keys.size(), generated);
  if (!co_await w.endStream()) {
    abortRequest(w);
    co_return;
  }
  ++request_success_;
}

asio::awaitable<void> Worker::handleCacheState(http::Request& req, http::ResponseWriter& w) {
  // The body of a completion or chat request (its prompt is tokenized as for inference); the
  // answer gives, per worker and data-parallel rank, how many leading full blocks of the prompt
  // that engine's cache holds right now, and the longest leading run a request waiting in its
  // queue shares (blocks it will hold once that one is admitted), and how many blocks its cache
  // holds in all. The benchmark's oracle reads it.
  const bool chat = req.body.find("\"messages\"") != std::string::npos;
  auto parsed = parseInference(req.body, chat);
  if (!parsed) {
    const Error& e = parsed.error();
    co_await w.send(e.code, "application/json",
                    vllmError(e.code, e.what, e.source.empty() ? nullptr : e.source.c_str()));
    co_return;
  }
  const std::vector<uint64_t> keys = ranks_[0]->cache.blockKeys(parsed->prompt);
  ojson workers = ojson::array();
  auto one = [&](const Worker& wk) {
    ojson ranks = ojson::array();
    size_t best = 0, best_queued = 0, held = 0;
    for (const auto& rank : wk.ranks_) {
      const size_t n = rank->cache.leadingBlocks(keys);
      held += rank->cache.cachedBlocks();
      best = std::max(best, n);
      if (!wk.cfg_.fixed_timing)
        best_queued = std::max(best_queued, rank->engine.queuedLeadingBlocks(keys));
      ranks.push_back(n);
    }
    ojson entry;
    entry["worker"] = wk.index_;
    entry["port"] = wk.port_;
    entry["blocks"] = best;
    entry["queued_blocks"] = best_queued;
    entry["cached_blocks"] = held;  // every block its cache holds (the oracle's cold-start test)
    entry["ranks"] = std::move(ranks);
    workers.push_back(std::move(entry));
  };
  if (fleet_) {
    for (const auto& wk : *fleet_)
      if (wk) one(*wk);
  } else {
    one(*this);
  }
  ojson answer;
  answer["block_size"] = cfg_.block_size;
  answer["prompt_tokens"] = parsed->prompt.size();
  answer["prompt_blocks"] = keys.size();
  answer["workers"] = std::move(workers);
  const std::string body = dumpJson(answer);
  co_await w.send(200, "application/json", body);
}

void Worker::storeResponse(const std::string& id, std::string body) {
  auto [it, fresh] = stored_responses_.try_emplace(id);
  it->second = std::move(body);  // (a client naming an id again replaces it, as vLLM's dict does)
  if (!fresh) return;
  stored_order_.push_back(id);
  if (stored_order_.size() > 65536) {
    stored_responses_.erase(stored_order_.front());
    stored_order_.pop_front();
  }
}

// GET /v1/responses/{id} and POST /v1/responses/{id}/cancel (vLLM's retrieve_responses and
// cancel_responses, no background mode here): an unknown id 404; a stored response is a finished
// one, so a cancel is 400 "Cannot cancel a synchronous response.".
asio::awaitable<void> Worker::handleStoredResponse(const std::string& id, bool cancel,
                                                   http::ResponseWriter& w,
                                                   const http::HeaderList& hdrs) {
  auto it = stored_responses_.find(id);
  if (it == stored_responses_.end()) {
    co_await w.send(404, "application/json", responseNotFound(id), hdrs);
    co_return;
  }
  if (!cancel) {
    co_await w.send(200, "application/json", it->second, hdrs);
    co_return;
  }
  co_await w.send(400, "application/json",
                  responsesError(400, "Cannot cancel a synchronous response.", nullptr), hdrs);
}

asio::awaitable<void> Worker::handle(http::Request& req, http::ResponseWriter& w) {
  http::HeaderList hdrs;
  std::string rid = req.header("X-Request-Id");
  if (!rid.empty() && isAcceptableRequestId(rid)) hdrs.emplace_back("X-Request-Id", rid);
  const std::string& p = req.path;
  const bool get = req.method == "GET";
  const bool post = req.method == "POST";
  if (post) {
    if (recent_.size() == kRecent) recent_.pop_front();
    auto cut = [](std::string v) { return v.size() > 256 ? v.substr(0, 256) : v; };
    recent_.push_back(
        {cut(p), cut(rid), cut(req.header("traceparent")), cut(req.header("tracestate"))});
  }
  if (p == "/v1/chat/completions" || p == "/v1/completions") {
    if (post) {
      co_await handleInference(req, w, p == "/v1/chat/completions" ? Api::kChat : Api::kCompletions,
                               hdrs);
      co_return;
    }
  } else if (p == "/v1/messages") {
    if (post) {
      co_await handleInference(req, w, Api::kMessages, hdrs);
      co_return;
    }
  } else if (p == "/v1/responses") {
    if (post) {
      co_await handleInference(req, w, Api::kResponses, hdrs);
      co_return;
    }
  } else if (p.starts_with("/v1/responses/")) {
    std::string_view id = std::string_view(p).substr(14);
    const bool cancel = id.ends_with("/cancel");
    if (cancel) id.remove_suffix(7);
    if (id.find('/') == std::string_view::npos && ((get && !cancel) || (post && cancel))) {
      co_await handleStoredResponse(std::string(id), cancel, w, hdrs);
      co_return;
    }
  } else if (p == "/v1/messages/count_tokens") {
    if (post) {
      co_await handleCountTokens(req, w, hdrs);
      co_return;
    }
  } else if (p == "/tokenize" || p == "/detokenize" ||
             (cfg_.engine == "sglang" && (p == "/v1/tokenize" || p == "/v1/detokenize"))) {
    if (post) {
      co_await handleTokenize(req, w, hdrs, p.ends_with("/detokenize"));
      co_return;
    }
  } else if (p == "/v1/embeddings" || p == "/rerank" || p == "/v1/rerank" || p == "/v2/rerank" ||
             p == "/score" || p == "/v1/score" || p == "/classify") {
    if (post) {
      const PoolingApi api = p == "/v1/embeddings"    ? PoolingApi::kEmbeddings
                             : p.ends_with("/rerank") ? PoolingApi::kRerank
                             : p.ends_with("/score")  ? PoolingApi::kScore
                                                      : PoolingApi::kClassify;
      co_await handlePooling(req, w, hdrs, api);
      co_return;
    }
  } else if (p == "/v1/models") {
    if (get) {
      co_await w.send(200, "application/json", modelsJson(), hdrs);
      co_return;
    }
  } else if (p == "/health") {
    if (get) {
      co_await w.send(200, "", "", hdrs);
      co_return;
    }
  } else if (p == "/version") {
    if (get) {
      co_await w.send(200, "application/json", "{\"version\":\"kvgate-sim\"}", hdrs);
      co_return;
    }
  } else if (p == "/metrics") {
    if (get) {
      co_await w.send(200, "text/plain; version=0.0.4; charset=utf-8", metricsText(), hdrs);
      co_return;
    }
  } else if (p == "/kv_cache_events" && ranks_[0]->pub && cfg_.kv_events.trtllm) {
    if (post) {  // TensorRT-LLM's destructive drain
      co_await w.send(200, "application/json", ranks_[0]->pub->drain(), hdrs);
      co_return;
    }
  } else if (p == "/reset_prefix_cache") {
    if (post) {
      for (auto& rank : ranks_) {
        rank->cache.clearUnreferenced();
        if (rank->pub) {  // AllBlocksCleared only when the cache really emptied
          if (rank->cache.cachedBlocks() == 0) rank->pub->cleared();
          rank->pub->flush();
        }
      }
      co_await w.send(200, "", "", hdrs);
      co_return;
    }
  } else if (p == "/sim/cache_state") {
    if (post) {
      co_await handleCacheState(req, w);
      co_return;
    }
  } else if (p == "/sim/recent") {
    if (get) {
      co_await w.send(200, "application/json", recentJson(), hdrs);
      co_return;
    }
  } else if (p == "/sim/fault") {
    if (get || post) {
      co_await handleFault(req, w);
      co_return;
    }
  } else {
    co_await w.send(404, "application/json", "{\"detail\":\"Not Found\"}", hdrs);
    co_return;
  }
  co_await w.send(405, "application/json", "{\"detail\":\"Method Not Allowed\"}", hdrs);
}

std::string Worker::recentJson() const {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : recent_)
    a.push_back({{"path", r.path},
                 {"request_id", r.request_id},
                 {"traceparent", r.traceparent},
                 {"tracestate", r.tracestate}});
  return a.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvgate::sim
