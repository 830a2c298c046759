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

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
};

std::string dumpJson(const ojson& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string errorType(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 404:
      return "NotFoundError";
    case 500:
      return "InternalServerError";
    default:
      break;
  }
  std::string t;
  for (const char* p = http::statusReason(status); *p; ++p)
    if (*p != ' ' && *p != '-') t.push_back(*p);
  return t + "Error";
}

// vLLM's error body: {"object":"error","message":...,"type":...,"param":...,"code":status}.
std::string vllmError(int status, std::string_view message, const char* param = nullptr) {
  ojson j = {{"object", "error"}, {"message", message}, {"type", errorType(status)}};
  j["param"] = param ? ojson(param) : ojson(nullptr);
  j["code"] = status;
  return dumpJson(j);
}

int64_t unixNow() { return static_cast<int64_t>(std::time(nullptr)); }

bool getInt(const json& v, int64_t lo, int64_t hi, int64_t& out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return false;
    out = static_cast<int64_t>(u);
    return out >= lo;
  }
  if (!v.is_number_integer()) return false;
  out = v.get<int64_t>();
  return out >= lo && out <= hi;
}

// A list of token ids; false when any element is not an integer in [0, 2^32).
bool tokenList(const json& v, std::vector<uint32_t>& out) {
  out.clear();
  for (const auto& t : v) {
    int64_t id = 0;
    if (!getInt(t, 0, 0xFFFFFFFFLL, id)) return false;
    out.push_back(static_cast<uint32_t>(id));
  }
  return true;
}

std::string base64(const unsigned char* p, size_t n) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = static_cast<uint32_t>(p[i]) << 16;
    if (i + 1 < n) v |= static_cast<uint32_t>(p[i + 1]) << 8;
    if (i + 2 < n) v |= p[i + 2];
    out.push_back(k[(v >> 18) & 63]);
    out.push_back(k[(v >> 12) & 63]);
    out.push_back(i + 1 < n ? k[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < n ? k[v & 63] : '=');
  }
  return out;
}

std::string fmtNum(double v) {
  char b[40];
  if (std::floor(v) == v && std::fabs(v) < 1e15)
    std::snprintf(b, sizeof b, "%.1f", v);
  else
    std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

void addMetric(std::string& out, std::string_view name, std::string_view type,
               std::string_view help, std::string_view labels, double value) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ");
  out.append(name).append(" ").append(type).append("\n");
  out.append(name).append("{").append(labels).append("} ").append(fmtNum(value)).append("\n");
}

// Closes the connection without (the rest of) a response.
void hangUp(http::ResponseWriter& w) {
  w.closeAfterResponse();
  error_code ec;
  w.socket().close(ec);
}

// Watches a connection while its request waits, to notice a client that went away.
struct DisconnectWatch {
  bool done = false;  // the request ended: the socket may be gone, touch nothing
  bool disconnected = false;
  asio::steady_timer* timer = nullptr;  // the request's timer, cancelled on disconnect
};

asio::awaitable<void> watchDisconnect(tcp::socket& sock, std::shared_ptr<DisconnectWatch> w) {
  for (;;) {
    if (w->done || !sock.is_open()) co_return;
    error_code ec;
    co_await sock.async_wait(tcp::socket::wait_read, useEc(ec));
    if (w->done || ec == asio::error::operation_aborted || !sock.is_open()) co_return;
    if (!ec) {
      char b;
      ssize_t n = ::recv(sock.native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) co_return;  // pipelined bytes, not a disconnect: stop watching
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    }
    w->disconnected = true;  // EOF or a socket error
    if (w->timer) w->timer->cancel();
    co_return;
  }
}
}  // namespace

std::string applyFaultJson(const json& j, FaultState& f) {
  if (!j.is_object()) return "fault body must be a JSON object";
  FaultState n = f;
  if (auto r = j.find("reset"); r != j.end()) {
    if (!r->is_boolean()) return "'reset' must be a boolean";
    if (r->get<bool>()) n = FaultState{};
  }
  constexpr int64_t kMax = int64_t{1} << 40;
  for (const auto& [key, v] : j.items()) {
    int64_t x = 0;
    if (key == "reset" || key == "worker") continue;
    if (key == "fail_requests") {
      if (!getInt(v, 0, kMax, x)) return "'fail_requests' must be an integer >= 0";
      n.fail_requests = x;
    } else if (key == "fail_status") {
      if (!getInt(v, 400, 599, x)) return "'fail_status' must be an integer in 400..599";
      n.fail_status = static_cast<int>(x);
    } else if (key == "refuse_connections") {
      if (!v.is_boolean()) return "'refuse_connections' must be a boolean";
      n.refuse_connections = v.get<bool>();
    } else if (key == "stall_ms") {
      if (!getInt(v, 0, kMax, x)) return "'stall_ms' must be an integer >= 0";
      n.stall_ms = x;
    } else if (key == "close_mid_stream_after") {
      if (v.is_null()) {
        n.close_mid_stream_after = -1;
      } else {
        if (!getInt(v, -kMax, kMax, x)) return "'close_mid_stream_after' must be an integer";
        n.close_mid_stream_after = x < 0 ? -1 : x;
      }
    } else if (key == "event_delay_ms") {
      if (!getInt(v, 0, kMax, x)) return "'event_delay_ms' must be an integer >= 0";
      n.event_delay_ms = x;
    } else {
      return "unknown fault field '" + key + "'";
    }
  }
  f = n;
  return {};
}

struct Worker::Inference {
  std::string model;
  std::vector<uint32_t> prompt;
  int64_t max_tokens = 0;
  bool stream = false;
  bool include_usage = false;
};

// Per-request state; the destructor gives back the slot and the cache blocks on every path.
struct Worker::RequestCtx {
  RequestCtx(Worker& w, tcp::socket& s)
      : worker(w), sock(s), timer(s.get_executor()), watch(std::make_shared<DisconnectWatch>()) {
    watch->timer = &timer;
    worker.active_.insert(this);
    asio::co_spawn(s.get_executor(), watchDisconnect(s, watch), asio::detached);
  }
  ~RequestCtx() {
    watch->done = true;
    watch->timer = nullptr;
    error_code ec;
    if (sock.is_open()) sock.cancel(ec);  // ends the watch's pending wait
    if (queued) {
      auto it = std::find(worker.waiters_.begin(), worker.waiters_.end(), this);
      if (it != worker.waiters_.end()) worker.waiters_.erase(it);
    }
    if (granted) worker.releaseSlot();
    if (has_alloc) worker.cache_.release(alloc);
    worker.active_.erase(this);
  }
  bool aborted() const { return worker.stopping_ || watch->disconnected; }

  Worker& worker;
  tcp::socket& sock;
  asio::steady_timer timer;
  std::shared_ptr<DisconnectWatch> watch;
  bool queued = false;
  bool granted = false;
  bool has_alloc = false;
  PrefixCache::Allocation alloc;
};

static http::ServerOptions serverOptions(const SimConfig& cfg) {
  http::ServerOptions o;
  o.idle_timeout = std::chrono::milliseconds(cfg.keepalive_timeout_ms);
  return o;
}

Worker::Worker(asio::io_context& io, const SimConfig& cfg, size_t index, const Fleet* fleet)
    : io_(io),
      cfg_(cfg),
      index_(index),
      fleet_(fleet),
      server_(
          io, [this](http::Request& r, http::ResponseWriter& w) { return handle(r, w); },
          serverOptions(cfg)),
      cache_(cfg.block_size, cfg.num_blocks),
      faults_(cfg.faults),
      created_(unixNow()) {
  if (cfg_.models.empty()) cfg_.models.push_back("sim-model");
  if (cfg_.speedup <= 0) cfg_.speedup = 1.0;
  if (cfg_.max_concurrency == 0) cfg_.max_concurrency = 1;
}

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
}

Result<void> Worker::setFaults(const FaultState& next) {
  if (next.refuse_connections && !faults_.refuse_connections) {
    server_.pauseAccepting();
  } else if (!next.refuse_connections && faults_.refuse_connections) {
    auto r = server_.resumeAccepting();
    if (!r) return tl::unexpected(r.error());
  }
  faults_ = next;
  return {};
}

nlohmann::ordered_json Worker::faultJson() const {
  ojson j = {{"worker", index_},
             {"fail_requests", faults_.fail_requests},
             {"fail_status", faults_.fail_status},
             {"refuse_connections", faults_.refuse_connections},
             {"stall_ms", faults_.stall_ms}};
  j["close_mid_stream_after"] =
      faults_.close_mid_stream_after < 0 ? ojson(nullptr) : ojson(faults_.close_mid_stream_after);
  j["event_delay_ms"] = faults_.event_delay_ms;
  j["faults_injected_total"] = faults_injected_;
  return j;
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
      one = &(*p)[0];  // a batch of one prompt
    if (one->is_string()) {
      in.prompt = tokenizerFor(in.model).encode(one->get_ref<const std::string&>());
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
  return in;
}

asio::awaitable<void> Worker::handleInference(http::Request& req, http::ResponseWriter& w,
                                              bool chat, const http::HeaderList& hdrs) {
  ++requests_total_;
  RequestCtx ctx(*this, w.socket());
  if (!co_await faultPreamble(ctx, w, hdrs)) co_return;
  const int64_t close_after = faults_.close_mid_stream_after;
  const double event_delay = static_cast<double>(faults_.event_delay_ms);
  auto parsed = parseInference(req.body, chat);
  if (!parsed) {
    const Error& e = parsed.error();
    co_await w.send(e.code, "application/json",
                    vllmError(e.code, e.what, e.source.empty() ? nullptr : e.source.c_str()), hdrs);
    co_return;
  }
  const Inference& in = *parsed;
  std::string base = hdrs.empty() ? newRequestId() : hdrs.front().second;  // vLLM: X-Request-Id
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + base;
  const int64_t created = unixNow();
  const auto plen = static_cast<int64_t>(in.prompt.size());
  const int64_t ntok = in.max_tokens;
  SplitMix64 rng{cfg_.seed * 0x9E3779B97F4A7C15ULL ^
                 XXH3_64bits(in.prompt.data(), in.prompt.size() * sizeof(uint32_t))};
  auto nextToken = [&rng](int64_t i) {
    return std::string(i == 0 ? "" : " ") + kWords[rng.next() % kWords.size()];
  };

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
  if (!co_await acquireSlot(ctx)) {
    abortRequest(w);
    co_return;
  }
  ctx.alloc = cache_.acquire(in.prompt);
  ctx.has_alloc = true;
  // vLLM caps a hit at num_tokens - 1 (the last prompt token is always recomputed to produce
  // logits), rounded down to whole blocks: a fully cached 32-token prompt reports 16 cached.
  const auto bs = static_cast<int64_t>(cfg_.block_size);
  const int64_t max_hit = plen > 0 ? ((plen - 1) / bs) * bs : 0;
  const auto cached = std::min(static_cast<int64_t>(ctx.alloc.cached_tokens), max_hit);
  prefix_queries_ += static_cast<uint64_t>(plen);
  prefix_hits_ += static_cast<uint64_t>(cached);
  double prefill_ms =
      cfg_.prefill_base_ms + static_cast<double>(plen - cached) * cfg_.prefill_us_per_token / 1e3;
  if (!co_await sleepFor(ctx, prefill_ms)) {
    abortRequest(w);
    co_return;
  }
  prompt_tokens_ += static_cast<uint64_t>(plen);
  const std::string usage =
      "{\"prompt_tokens\":" + std::to_string(plen) +
      ",\"completion_tokens\":" + std::to_string(ntok) +
      ",\"total_tokens\":" + std::to_string(plen + ntok) +
      ",\"prompt_tokens_details\":{\"cached_tokens\":" + std::to_string(cached) + "}}";

  if (!in.stream) {
    std::string text;
    for (int64_t i = 0; i < ntok; ++i) {
      if (i > 0 && !co_await sleepFor(ctx, cfg_.itl_ms)) {
        abortRequest(w);
        co_return;
      }
      ++generation_tokens_;
      text += nextToken(i);
    }
    ojson choice = {{"index", 0}};
    if (chat)
      choice["message"] = {{"role", "assistant"}, {"content", text}};
    else
      choice["text"] = text;
    choice["finish_reason"] = "length";
    choice["logprobs"] = nullptr;
    ojson resp = {{"id", id},
                  {"object", chat ? "chat.completion" : "text_completion"},
                  {"created", created},
                  {"model", in.model},
                  {"choices", ojson::array({choice})},
                  {"usage", ojson::parse(usage)}};
    std::string body = dumpJson(resp);
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
  const int64_t first_tok = chat ? 1 : 0;
  const int64_t total = first_tok + ntok + (in.include_usage ? 1 : 0) + 1;
  if (event_delay > 0) ++faults_injected_;
  for (int64_t e = 0; e < total; ++e) {
    const int64_t tok = e - first_tok;
    const bool is_token = tok >= 0 && tok < ntok;
    if (close_after >= 0 && e >= close_after) {  // fault: cut the stream, no terminating chunk
      ++faults_injected_;
      hangUp(w);
      co_return;
    }
    double delay = e > 0 ? event_delay : 0.0;
    if (is_token && tok > 0) delay += cfg_.itl_ms;
    if (delay > 0 && !co_await sleepFor(ctx, delay)) {
      abortRequest(w);
      co_return;
    }
    std::string ev = "data: ";
    if (tok < 0) {
      ev += head +
            "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
            "\"logprobs\":null,\"finish_reason\":null}]" +
            usage_null + "}";
    } else if (is_token) {
      ++generation_tokens_;
      ev += head + (chat ? "{\"index\":0,\"delta\":{\"content\":\"" : "{\"index\":0,\"text\":\"");
      ev += http::jsonEscape(nextToken(tok));
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
    ev += "\n\n";
    if (!co_await w.writeChunk(ev)) {
      abortRequest(w);
      co_return;
    }
  }
  if (!co_await w.endStream()) {
    abortRequest(w);
    co_return;
  }
  ++request_success_;
}

asio::awaitable<void> Worker::handleEmbeddings(http::Request& req, http::ResponseWriter& w,
                                               const http::HeaderList& hdrs) {
  ++requests_total_;
  RequestCtx ctx(*this, w.socket());
  if (!co_await faultPreamble(ctx, w, hdrs)) co_return;
  // A coroutine so the error body lives in its frame until the write completes.
  auto bad = [&](int status, std::string msg,
                 const char* param = nullptr) -> asio::awaitable<void> {
    std::string body = vllmError(status, msg, param);
    co_await w.send(status, "application/json", body, hdrs);
  };
  json j = jsonDepthWithin(req.body) ? json::parse(req.body, nullptr, false) : json();
  if (j.is_discarded() || !j.is_object()) {
    co_await bad(400, "Request body must be a JSON object.");
    co_return;
  }
  std::string model = cfg_.models.front();
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string() || std::find(cfg_.models.begin(), cfg_.models.end(),
                                     m->get<std::string>()) == cfg_.models.end()) {
      co_await bad(404,
                   "The model `" + (m->is_string() ? m->get<std::string>() : m->dump()) +
                       "` does not exist.",
                   "model");
      co_return;
    }
    model = m->get<std::string>();
  }
  bool b64 = false;
  if (auto f = j.find("encoding_format"); f != j.end() && f->is_string())
    b64 = f->get<std::string>() == "base64";
  std::vector<std::vector<uint32_t>> inputs;
  auto input = j.find("input");
  bool ok = input != j.end() && (input->is_string() || (input->is_array() && !input->empty()));
  if (ok && input->is_string()) {
    inputs.push_back(tokenizerFor(model).encode(input->get_ref<const std::string&>()));
  } else if (ok && (*input)[0].is_number()) {
    inputs.emplace_back();
    ok = tokenList(*input, inputs.back());
  } else if (ok) {
    for (const auto& item : *input) {
      inputs.emplace_back();
      if (item.is_string())
        inputs.back() = tokenizerFor(model).encode(item.get_ref<const std::string&>());
      else if (!item.is_array() || !tokenList(item, inputs.back()))
        ok = false;
    }
  }
  if (!ok) {
    co_await bad(400, "'input' must be a string, a list of strings, or token id lists.", "input");
    co_return;
  }
  uint64_t ntok = 0;
  for (const auto& t : inputs) ntok += t.size();
  if (!co_await sleepFor(ctx, cfg_.prefill_base_ms +
                                  static_cast<double>(ntok) * cfg_.prefill_us_per_token / 1e3)) {
    abortRequest(w);
    co_return;
  }
  prompt_tokens_ += ntok;
  ojson data = ojson::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    SplitMix64 rng{cfg_.seed ^ XXH3_64bits(inputs[i].data(), inputs[i].size() * 4)};
    std::array<float, 8> v{};
    double norm = 0;
    for (float& x : v) {
      x = static_cast<float>(static_cast<double>(rng.next() >> 11) / 9007199254740992.0 * 2 - 1);
      norm += static_cast<double>(x) * x;
    }
    norm = norm > 0 ? std::sqrt(norm) : 1;
    for (float& x : v) x = static_cast<float>(x / norm);
    ojson emb = ojson::array();
    for (float x : v) emb.push_back(x);
    if (b64) emb = base64(reinterpret_cast<const unsigned char*>(v.data()), sizeof v);
    data.push_back({{"index", i}, {"object", "embedding"}, {"embedding", emb}});
  }
  ojson resp = {{"id", "embd-" + newRequestId()},
                {"object", "list"},
                {"created", unixNow()},
                {"model", model},
                {"data", data}};
  resp["usage"] = {{"prompt_tokens", ntok},
                   {"total_tokens", ntok},
                   {"completion_tokens", 0},
                   {"prompt_tokens_details", nullptr}};
  if (co_await w.send(200, "application/json", dumpJson(resp), hdrs)) ++request_success_;
}

std::string Worker::modelsJson() const {
  ojson data = ojson::array();
  for (const auto& m : cfg_.models) {
    data.push_back({{"id", m},
                    {"object", "model"},
                    {"created", created_},
                    {"owned_by", "vllm"},
                    {"root", m},
                    {"parent", nullptr},
                    {"max_model_len", cfg_.max_model_len}});
  }
  return dumpJson(ojson{{"object", "list"}, {"data", data}});
}

std::string Worker::metricsText() const {
  std::string out;
  out.reserve(4096);
  const std::string labels =
      "model_name=\"" + http::jsonEscape(cfg_.models.front()) + "\",engine=\"0\"";
  auto d = [](uint64_t v) { return static_cast<double>(v); };
  addMetric(out, "vllm:num_requests_running", "gauge",
            "Number of requests in model execution batches.", labels, d(running_));
  addMetric(out, "vllm:num_requests_waiting", "gauge",
            "Number of requests waiting to be processed.", labels, d(waiters_.size()));
  double usage = cache_.capacity() ? d(cache_.usedBlocks()) / d(cache_.capacity()) : 0.0;
  addMetric(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
            labels, usage);
  addMetric(out, "vllm:prefix_cache_queries_total", "counter",
            "Prefix cache queries, in terms of number of queried tokens.", labels,
            d(prefix_queries_));
  addMetric(out, "vllm:prefix_cache_hits_total", "counter",
            "Prefix cache hits, in terms of number of cached tokens.", labels, d(prefix_hits_));
  addMetric(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
            labels, d(prompt_tokens_));
  addMetric(out, "vllm:generation_tokens_total", "counter",
            "Number of generation tokens processed.", labels, d(generation_tokens_));
  addMetric(out, "vllm:request_success_total", "counter",
            "Count of successfully processed requests.", labels + ",finished_reason=\"length\"",
            d(request_success_));
  addMetric(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
            "block_size=\"" + std::to_string(cache_.blockSize()) +
                "\",enable_prefix_caching=\"True\",engine=\"0\",num_gpu_blocks=\"" +
                std::to_string(cache_.capacity()) + "\"",
            1.0);
  addMetric(out, "kvgate_sim_requests_total", "counter",
            "Inference requests received by the simulated worker.", labels, d(requests_total_));
  addMetric(out, "kvgate_sim_requests_aborted_total", "counter",
            "Requests whose client disconnected before completion.", labels, d(requests_aborted_));
  addMetric(out, "kvgate_sim_faults_injected_total", "counter",
            "Faults injected (failed, stalled, cut or delayed requests).", labels,
            d(faults_injected_));
  return out;
}

asio::awaitable<void> Worker::handleFault(http::Request& req, http::ResponseWriter& w) {
  // `body` is the caller's temporary, alive until the end of its co_await expression.
  auto reply = [&](int status, const std::string& body) {
    return w.send(status, "application/json", body);
  };
  Worker* target = this;
  json j = json::object();
  if (req.method == "POST" && !req.body.empty()) {
    j = jsonDepthWithin(req.body) ? json::parse(req.body, nullptr, false) : json();
    if (j.is_discarded() || !j.is_object()) {
      co_await reply(400, vllmError(400, "fault body must be a JSON object"));
      co_return;
    }
  }
  std::optional<json> which;
  if (auto it = j.find("worker"); it != j.end()) which = *it;
  if (auto q = req.queryParam("worker")) which = json::parse(*q, nullptr, false);
  if (which) {
    int64_t i = 0;
    size_t n = fleet_ ? fleet_->size() : 0;
    if (!getInt(*which, 0, static_cast<int64_t>(n) - 1, i) || !(*fleet_)[i]) {
      co_await reply(400, vllmError(400, "'worker' must be an index in 0.." +
                                             std::to_string(n == 0 ? 0 : n - 1)));
      co_return;
    }
    target = (*fleet_)[static_cast<size_t>(i)].get();
  }
  if (req.method == "POST") {
    FaultState next = target->faults_;
    std::string err = applyFaultJson(j, next);
    if (!err.empty()) {
      co_await reply(400, vllmError(400, err));
      co_return;
    }
    auto r = target->setFaults(next);
    if (!r) {
      co_await reply(500, vllmError(500, r.error().what));
      co_return;
    }
  }
  co_await reply(200, dumpJson(target->faultJson()));
}

asio::awaitable<void> Worker::handle(http::Request& req, http::ResponseWriter& w) {
  http::HeaderList hdrs;
  std::string rid = req.header("X-Request-Id");
  if (!rid.empty() && isAcceptableRequestId(rid)) hdrs.emplace_back("X-Request-Id", rid);
  const std::string& p = req.path;
  const bool get = req.method == "GET";
  const bool post = req.method == "POST";
  if (p == "/v1/chat/completions" || p == "/v1/completions") {
    if (post) {
      co_await handleInference(req, w, p == "/v1/chat/completions", hdrs);
      co_return;
    }
  } else if (p == "/v1/embeddings") {
    if (post) {
      co_await handleEmbeddings(req, w, hdrs);
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
  } else if (p == "/reset_prefix_cache") {
    if (post) {
      cache_.clearUnreferenced();
      co_await w.send(200, "", "", hdrs);
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

}  // namespace kvgate::sim
