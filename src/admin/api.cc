#include "admin/api.h"

#include <nlohmann/json.hpp>

#include "admin/ui/ui_page.h"
#include "common/json_depth.h"
#include "common/log.h"
#include "common/net.h"
#include "events/kv_sources.h"
#include "metrics/text.h"
#include "sockmap/sockmap_relay.h"
#include "tokenizer/chat.h"

namespace kvgate::admin {
namespace {

constexpr std::string_view kBase = "/netlox/v1/config/loadbalancer";
constexpr size_t kMaxApiBody = 4 * 1024 * 1024;

std::vector<std::string> splitPath(std::string_view p) {
  std::vector<std::string> out;
  while (!p.empty()) {
    if (p.front() == '/') {
      p.remove_prefix(1);
      continue;
    }
    size_t s = p.find('/');
    out.emplace_back(p.substr(0, s));
    if (s == std::string_view::npos) break;
    p.remove_prefix(s);
  }
  return out;
}

const char* classMessage(int status) {
  switch (status) {
    case 400:
      return "Malformed arguments for API call";
    case 401:
      return "Invalid authorization";
    case 403:
      return "Capacity insufficient";
    case 404:
      return "Resource not found";
    case 405:
      return "Method not allowed";
    case 409:
      return "Resource conflict";
    case 413:
      return "Request body too large";
    case 503:
      return "Maintenance mode";
    default:
      return "Internal server error";
  }
}

}  // namespace

std::string apiErrorBody(int status, const std::string& detail) {
  nlohmann::json j = {{"code", status}, {"message", classMessage(status)}, {"result", detail}};
  return j.dump(-1, ' ', false,
                nlohmann::json::error_handler_t::replace);  // details may quote raw bytes
}

std::string Api::tokenizerMetrics() const {
  metrics::TextWriter m;
  m.header(metrics::kTokenizers);
  for (const auto& [model, state] : tokenizer_state_)
    m.sample(metrics::kTokenizers, {{"model", model}, {"state", state}}, 1);
  m.header(metrics::kTokenizeRequests);
  for (const char* o : {"ok", "bad_request", "no_tokenizer", "error"}) {
    auto it = tokenize_outcomes_.find(o);
    m.sample(metrics::kTokenizeRequests, {{"outcome", o}},
             static_cast<double>(it == tokenize_outcomes_.end() ? 0 : it->second));
  }
  return m.str();
}

// Body: {"model": M, "prompt": "text", "add_special_tokens"?: bool (default true)} or
//       {"model": M, "messages": [...], ...chat request fields} (template applied as vLLM does).
// Answer: {"model", "count", "tokens", "prompt"?: rendered chat prompt}. Errors: 400 bad body,
// 404 no tokenizer files for the model, 422 broken files, 503 serve runs without --models-dir.
Api::TokenizeResult Api::computeTokenize(const std::string& body) const {
  TokenizeResult res;
  auto bad = [&](int status, const char* outcome, std::string detail) {
    res.status = status;
    res.outcome = outcome;
    res.body = std::move(detail);
    return res;
  };
  if (!jsonDepthWithin(body)) return bad(400, "bad_request", "JSON body nested too deeply");
  auto j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("model") || !j["model"].is_string())
    return bad(400, "bad_request", "body must be a JSON object with a string 'model'");
  res.model = j["model"];
  auto t = tokenizers_->get(res.model);
  if (!t) {
    int code = t.error().code;
    if (code == 404 || code == 422) res.state = code == 404 ? "missing" : "error";
    return bad(code,
               code == 400   ? "bad_request"
               : code == 404 ? "no_tokenizer"
                             : "error",
               t.error().what);
  }
  res.state = "loaded";
  nlohmann::ordered_json out = {{"model", res.model}};
  std::vector<uint32_t> ids;
  if (j.contains("messages")) {
    std::string rendered;
    auto r = tok::encodeChat(**t, j, &rendered);
    if (!r) return bad(400, "bad_request", r.error().what);
    ids = std::move(*r);
    out["prompt"] = rendered;
  } else if (j.contains("prompt") && j["prompt"].is_string()) {
    bool special = true;
    if (j.contains("add_special_tokens")) {
      if (!j["add_special_tokens"].is_boolean())
        return bad(400, "bad_request", "add_special_tokens must be a boolean");
      special = j["add_special_tokens"].get<bool>();
    }
    ids = (*t)->encode(j["prompt"].get<std::string>(), special);
  } else {
    return bad(400, "bad_request", "give a string 'prompt' or a 'messages' array");
  }
  out["count"] = ids.size();
  out["tokens"] = ids;
  res.outcome = "ok";
  res.body = out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return res;
}

// Body: {"model": M, "prompt": "text", "add_special_tokens"?: bool (default true)} or
//       {"model": M, "messages": [...], ...chat request fields} (template applied as vLLM does).
// Answer: {"model", "count", "tokens", "prompt"?: rendered chat prompt}. Errors: 400 bad body,
// 404 no tokenizer files for the model, 422 broken files, 503 serve runs without --models-dir
// or too many tokenize calls at once.
asio::awaitable<void> Api::tokenize(http::Request& req, http::ResponseWriter& w) {
  TokenizeResult res;
  if (req.method != "POST") {
    res = {405, "bad_request", "use POST on /kvgate/v1/tokenize", {}, {}};
  } else if (!tokenizers_) {
    res = {503, "no_tokenizer", "tokenization needs kvgate serve --models-dir DIR", {}, {}};
  } else if (req.body.size() > kMaxApiBody) {
    res = {413, "bad_request", "request body too large", {}, {}};
  } else if (tokenize_in_flight_ >= kMaxTokenizeInFlight) {
    res = {503, "error", "too many tokenize calls in progress; retry", {}, {}};
  } else {
    ++tokenize_in_flight_;
    struct Done {  // released on every path, exceptions included
      int& n;
      ~Done() { --n; }
    } done{tokenize_in_flight_};
    // Runs on the tokenize thread; the result comes back to this (control) thread.
    res = co_await asio::co_spawn(
        tokenize_pool_.get_executor(),
        [this, &req]() -> asio::awaitable<TokenizeResult> { co_return computeTokenize(req.body); },
        asio::use_awaitable);
  }
  ++tokenize_outcomes_[res.outcome];
  // Bounded: at most 256 distinct models are labelled (names come from clients).
  if (!res.state.empty() && (tokenizer_state_.size() < 256 || tokenizer_state_.count(res.model)))
    tokenizer_state_[res.model] = res.state;
  if (res.status >= 400) {
    log::info("api", "POST /kvgate/v1/tokenize -> " + std::to_string(res.status) + ": " + res.body);
    res.body = apiErrorBody(res.status, res.body);
  }
  co_await w.send(res.status, "application/json", res.body);
}

namespace {
// A non-negative integer query parameter within [lo, hi]; nullopt when present but invalid.
std::optional<size_t> queryInt(const http::Request& req, const char* name, size_t dflt, size_t lo,
                               size_t hi) {
  auto v = req.queryParam(name);
  if (!v) return dflt;
  if (v->empty() || v->size() > 12) return std::nullopt;
  size_t x = 0;
  for (char c : *v) {
    if (c < '0' || c > '9') return std::nullopt;
    x = x * 10 + static_cast<size_t>(c - '0');
  }
  if (x < lo || x > hi) return std::nullopt;
  return x;
}
}  // namespace

asio::awaitable<Result<Api::KvInventory>> Api::askInventory(InventoryFn fn, std::string key,
                                                            int rank, size_t offset, size_t limit) {
  co_return fn(key, rank, offset, limit);
}

asio::awaitable<void> Api::kvInventory(http::Request& req, http::ResponseWriter& w) {
  int status = 200;
  std::string body;
  auto fail_with = [&](int s, std::string detail) {
    status = s;
    body = std::move(detail);
  };
  const auto service = req.queryParam("service_id");
  const auto ep_idx = queryInt(req, "ep_idx", SIZE_MAX, 0, 4095);
  const auto rank = queryInt(req, "dp_rank", 0, 0, 15);
  const auto offset = queryInt(req, "offset", 0, 0, 100'000'000);
  const auto limit = queryInt(req, "limit", 1000, 1, 100'000);
  const config::RuleSpec* rule = nullptr;
  if (req.method != "GET") {
    fail_with(405, "use GET on /netlox/v1/config/ai/kv/inventory");
  } else if (!service || service->empty() || !ep_idx || *ep_idx == SIZE_MAX) {
    fail_with(400, "service_id (a rule's name or key) and ep_idx (0..4095) are required");
  } else if (!rank || !offset || !limit) {
    fail_with(400, "invalid dp_rank (0..15), offset (0..100000000) or limit (1..100000)");
  } else if (!inventory_) {
    fail_with(503, "the KV event plane is not running");
  } else {
    for (const auto& r : store_.rules())
      if (r.name == *service || r.key() == *service) rule = &r;
    if (!rule) fail_with(404, "no rule named " + *service);
  }
  std::string key, algo;
  int rank_count = 1;
  if (rule) {
    const auto& sa = rule->service_args;
    const int mode = sa.value("kvExactMode", 0);
    rank_count = sa.value("kvDpRankCount", 1);
    algo = events::hashAlgoOf(*rule);
    if (*ep_idx >= rule->endpoints.size()) {
      fail_with(404, "rule " + *service + " has " + std::to_string(rule->endpoints.size()) +
                         " endpoint(s); no ep_idx " + std::to_string(*ep_idx));
    } else if (mode != 1 && mode != 3) {
      fail_with(404, "rule " + *service + " does not follow KV events (kvExactMode 0)");
    } else if (mode == 1 && rule->endpoints[*ep_idx].role != 1) {
      fail_with(404, "endpoint " + std::to_string(*ep_idx) +
                         " is not a prefill endpoint: its KV events are not followed");
    } else if (static_cast<int>(*rank) >= rank_count) {
      fail_with(404, "the rule has " + std::to_string(rank_count) + " DP rank(s)");
    } else {
      // The publisher key as the event plane names it (events/kv_sources.cc).
      key = events::publisherKey(*rule, *ep_idx);
      if (key.empty()) fail_with(404, "the rule's engine publishes no KV events (llamacpp)");
    }
  }
  if (!key.empty() && inventory_in_flight_ >= 4) {
    fail_with(503, "too many inventory requests in progress; retry");
    key.clear();
  }
  if (!key.empty()) {
    ++inventory_in_flight_;
    struct Done {  // released on every path, exceptions included
      int& n;
      ~Done() { --n; }
    } done{inventory_in_flight_};
    const int r = static_cast<int>(*rank);
    const size_t off = *offset, lim = *limit;
    // The wait for the event thread runs on inventory_pool_, never on the control thread. (A
    // coroutine taking its arguments by value, not a lambda with owning captures: GCC 12 frees
    // such captures twice when the lambda is a temporary inside co_await.)
    Result<KvInventory> inv =
        co_await asio::co_spawn(inventory_pool_.get_executor(),
                                askInventory(inventory_, key, r, off, lim), asio::use_awaitable);
    if (!inv) {
      fail_with(inv.error().code, inv.error().what);
    } else {
      nlohmann::ordered_json j = {{"service_id", *service}, {"ep_idx", *ep_idx},
                                  {"dp_rank", r},           {"hash_algo", algo},
                                  {"offset", off},          {"total", inv->total}};
      nlohmann::ordered_json blocks = nlohmann::ordered_json::array();
      for (size_t i = 0; i < inv->hashes.size(); ++i)
        blocks.push_back({{"block_idx", off + i}, {"hash_uint64", inv->hashes[i]}});
      j["blocks"] = std::move(blocks);
      body = j.dump();
    }
  }
  if (status >= 400) {
    log::info("api",
              "GET /netlox/v1/config/ai/kv/inventory -> " + std::to_string(status) + ": " + body);
    body = apiErrorBody(status, body);
  }
  co_await w.send(status, "application/json", body);
}

std::string Api::uiMetrics() const {
  metrics::TextWriter m;
  m.header(metrics::kUiViewers);
  m.sample(metrics::kUiViewers, {}, static_cast<double>(ui_viewers_));
  m.header(metrics::kUiSnapshots);
  m.sample(metrics::kUiSnapshots, {{"outcome", "sent"}}, static_cast<double>(ui_snapshots_));
  m.sample(metrics::kUiSnapshots, {{"outcome", "viewer_dropped"}},
           static_cast<double>(ui_dropped_));
  m.header(metrics::kUiDecisionsDropped);
  m.sample(metrics::kUiDecisionsDropped, {}, static_cast<double>(feed_ ? feed_->dropped() : 0));
  return m.str();
}

// The dashboard's stream: a snapshot every second (?interval_ms=) as a server-sent event "snapshot"
// (data: one JSON object: "t" unix ms, "rules" as GET /all gives them, "metrics" the /metrics text,
// "decisions" the routing decisions since the last snapshot, at most DecisionFeed::kCapacity).
// Bounded: kMaxUiViewers at once (503 beyond), and a viewer that has not taken a snapshot within
// kUiWriteTimeout is dropped (the control thread never waits on it longer; the data plane never
// waits on it at all: it only appends decisions while someone watches).
asio::awaitable<void> Api::uiStream(http::Request& req, http::ResponseWriter& w) {
  if (req.method != "GET") {
    co_await w.send(405, "application/json", apiErrorBody(405, "use GET on /kvgate/v1/ui/stream"));
    co_return;
  }
  if (ui_viewers_ >= kMaxUiViewers) {
    std::string body = apiErrorBody(
        503, "too many dashboards streaming (" + std::to_string(kMaxUiViewers) + "); try again");
    co_await w.send(503, "application/json", body);
    co_return;
  }
  struct Viewer {
    Api& api;
    explicit Viewer(Api& a) : api(a) {
      ++api.ui_viewers_;
      if (api.feed_) api.feed_->addViewer();
    }
    ~Viewer() {
      --api.ui_viewers_;
      if (api.feed_) api.feed_->removeViewer();
      // (the last viewer gone: the shared snapshot, a whole /metrics text, is not kept)
      if (api.ui_viewers_ == 0) std::string().swap(api.ui_shared_);
    }
  } viewer(*this);
  // ?interval_ms=: the time between snapshots (500 .. 10000; default 1000).
  uint64_t interval_ms = 1000;
  if (auto q = req.queryParam("interval_ms")) {
    if (!net::parseUint(*q, 10000, interval_ms) || interval_ms < kUiMinIntervalMs) {
      co_await w.send(400, "application/json",
                      apiErrorBody(400, "interval_ms must be " + std::to_string(kUiMinIntervalMs) +
                                            " .. 10000"));
      co_return;
    }
  }
  // (the last decisions already kept come with the first snapshot)
  uint64_t cursor = 0;
  if (feed_) {
    const uint64_t newest = feed_->newest();
    cursor = newest > 50 ? newest - 50 : 0;
  }
  http::HeaderList extra;
  extra.emplace_back("Cache-Control", "no-store");
  w.closeAfterResponse();
  // What a viewer that reads nothing can leave in the kernel for it: a few snapshots, then its
  // writes wait and the timeout below drops it.
  {
    error_code ec;
    w.socket().set_option(asio::socket_base::send_buffer_size(256 * 1024), ec);
  }
  if (!co_await w.beginStream(200, "text/event-stream", std::move(extra))) co_return;
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer tick(ex);
  bool dropped = false;
  Deadline slow(ex);
  slow.start([&w, &dropped] {
    dropped = true;
    error_code ec;
    w.socket().close(ec);
  });
  for (;;) {
    // The rules and the /metrics text: made once per kUiShareFor, whatever the viewers.
    const auto now = std::chrono::steady_clock::now();
    if (ui_shared_.empty() || now - ui_shared_at_ >= kUiShareFor) {
      nlohmann::json shared;
      shared["rules"] = nlohmann::json::array();
      for (auto& r : store_.rules()) {
        nlohmann::json j = ruleJson(r);
        j["label"] = r.name.empty() ? r.key() : r.name;  // the rule/service label of /metrics
        shared["rules"].push_back(std::move(j));
      }
      shared["metrics"] = metrics_ ? metrics_() : std::string();
      ui_shared_ = shared.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      ui_shared_at_ = now;
    }
    nlohmann::json mine;
    mine["t"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
    mine["decisions"] = nlohmann::json::array();
    if (feed_)
      for (auto& d : feed_->since(cursor))
        mine["decisions"].push_back({{"seq", d.seq},
                                     {"t", d.unix_ms},
                                     {"id", d.request_id},
                                     {"rule", d.rule},
                                     {"model", d.model},
                                     {"endpoint", d.endpoint},
                                     {"prefill", d.prefill},
                                     {"tier", d.tier},
                                     {"key", d.key},
                                     {"status", d.status},
                                     {"spilled", d.spilled},
                                     {"matched", d.matched},
                                     {"ttfb_ms", d.ttfb_ms < 0 ? -1.0 : d.ttfb_ms}});
    // One object: this viewer's members, then the shared ones (spliced, not parsed again);
    // invalid UTF-8 from a client's model name is replaced, never a reason to throw.
    std::string body = mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    body.pop_back();  // '}'
    body += ',';
    body.append(ui_shared_, 1, std::string::npos);  // the shared object without its '{'
    std::string ev = "event: snapshot\ndata: " + body + "\n\n";
    slow.expireAfter(kUiWriteTimeout);
    const bool ok = co_await w.writeChunk(ev);
    slow.clear();
    if (!ok) break;
    ++ui_snapshots_;
    tick.expires_after(std::chrono::milliseconds(interval_ms));
    error_code ec;
    co_await tick.async_wait(useEc(ec));
    if (ec) break;
  }
  if (dropped) {
    ++ui_dropped_;
    log::info("api", "a dashboard viewer was dropped: it took no snapshot within " +
                         std::to_string(kUiWriteTimeout.count()) + " s");
  }
}

asio::awaitable<void> Api::handle(http::Request& req, http::ResponseWriter& w) {
  auto ok = [&]() -> asio::awaitable<void> {
    co_await w.send(200, "application/json", R"({"result":"Success"})");
  };
  auto err = [&](int status, const std::string& detail) -> asio::awaitable<void> {
    if (status >= 400)
      log::info("api",
                req.method + " " + req.path + " -> " + std::to_string(status) + ": " + detail);
    co_await w.send(status, "application/json", apiErrorBody(status, detail));
  };

  std::string_view path = req.path;
  if (tokens_.enabled() && !isPublicApiPath(path) && !tokens_.allows(req.header("authorization"))) {
    log::info("api", req.method + " " + req.path + " -> 401 (no valid API token) from " +
                         req.remote_ip);
    // (locals, not temporaries, in a co_await: GCC 12)
    http::HeaderList extra;
    extra.emplace_back("WWW-Authenticate", "Bearer realm=\"kvgate\"");
    std::string body = apiErrorBody(401, "a bearer token from --api-token-file is required");
    co_await w.send(401, "application/json", body, std::move(extra));
    co_return;
  }
  if (path == "/metrics" || path == "/netlox/v1/metrics") {
    if (req.method != "GET") {
      co_await err(405, "use GET on /metrics");
      co_return;
    }
    // A named local: GCC 12 double-destroys a conditional's temporary inside co_await.
    std::string text = metrics_ ? metrics_() : std::string();
    text += tokenizerMetrics();
    text += uiMetrics();
    co_await w.send(200, "text/plain; version=0.0.4; charset=utf-8", text);
    co_return;
  }
  if (path == "/ui" || path == "/ui/") {  // the live dashboard's page (docs/operations.md)
    if (req.method != "GET") {
      co_await err(405, "use GET on /ui");
      co_return;
    }
    http::HeaderList extra;
    extra.emplace_back("Cache-Control", "no-store");
    // (everything it runs is in the page: no script, style or font from elsewhere)
    extra.emplace_back("Content-Security-Policy",
                       "default-src 'none'; script-src 'unsafe-inline'; style-src "
                       "'unsafe-inline'; connect-src 'self'; img-src data:; "
                       "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    co_await w.send(200, "text/html; charset=utf-8", uiPage(), std::move(extra));
    co_return;
  }
  if (path == "/kvgate/v1/ui/stream") {
    co_await uiStream(req, w);
    co_return;
  }
  if (path == "/healthz" || path == "/netlox/v1/status") {
    co_await w.send(200, "application/json", R"({"status":"ok"})");
    co_return;
  }
  if (path == "/kvgate/v1/tokenize") {
    co_await tokenize(req, w);
    co_return;
  }
  if (path == "/kvgate/v1/controller") {
    co_await controller(req, w);
    co_return;
  }
  if (path == "/netlox/v1/config/sockmapreset") {  // (upstream's: the relays in flight cut)
    if (req.method != "POST") {
      co_await err(405, "use POST on /netlox/v1/config/sockmapreset");
      co_return;
    }
    sockmap::Relay* relay = sockmap::Relay::get();
    const uint64_t dropped = relay ? relay->resetAll() : 0;
    log::info("admin", "POST /netlox/v1/config/sockmapreset: " + std::to_string(dropped) +
                           " sockmap relays cut");
    co_await w.send(200, "application/json",
                    R"({"droppedConnections":)" + std::to_string(dropped) + "}");
    co_return;
  }
  if (path == "/netlox/v1/config/ai/kv/inventory") {
    co_await kvInventory(req, w);
    co_return;
  }
  if (path == "/netlox/v1/config/ai/jwtauthprofile" ||
      path.starts_with("/netlox/v1/config/ai/jwtauthprofile/")) {
    co_await jwtProfiles(req, w);
    co_return;
  }
  if (path.starts_with("/netlox/v1/config/ai/tenant/ratelimit") ||
      path.starts_with("/netlox/v1/config/ai/user/ratelimit") ||
      path.starts_with("/netlox/v1/config/ai/ratelimit/defaults")) {
    co_await limits(req, w);
    co_return;
  }
  if (path == "/netlox/v1/config/ai/apikey" || path.starts_with("/netlox/v1/config/ai/apikey/")) {
    co_await apiKeys(req, w);
    co_return;
  }
  if (!path.starts_with(kBase)) {
    co_await err(404, "no such API path: " + req.path);
    co_return;
  }
  auto parts = splitPath(path.substr(kBase.size()));

  if (parts.empty()) {
    if (req.method != "POST") {
      co_await err(405, "use POST to create a rule");
      co_return;
    }
    if (req.body.size() > kMaxApiBody) {
      co_await err(413, "request body too large");
      co_return;
    }
    if (!jsonDepthWithin(req.body)) {
      co_await err(400, "JSON body nested too deeply");
      co_return;
    }
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded()) {
      co_await err(400, "malformed JSON body");
      co_return;
    }
    auto rule = config::parseRule(j);
    if (!rule) {
      co_await err(rule.error().code, rule.error().what);
      co_return;
    }
    std::string key = rule->key();
    auto r = store_.post(std::move(*rule));
    if (!r) {
      co_await err(r.error().code, r.error().what);
      co_return;
    }
    log::info("api", "rule committed: " + key);
    co_await ok();
    co_return;
  }

  if (parts.size() == 1 && parts[0] == "all") {
    if (req.method == "GET") {
      nlohmann::json out = {{"lbAttr", nlohmann::json::array()}};
      auto project = req.queryParam("projectId");
      for (auto& r : store_.rules()) {
        if (project && r.service_args.value("projectId", "") != *project) continue;
        out["lbAttr"].push_back(ruleJson(r));
      }
      co_await w.send(200, "application/json", out.dump());
    } else if (req.method == "DELETE") {
      if (!store_.rules().empty()) {
        auto r = store_.removeIf([](const config::RuleSpec&) { return true; }, "all");
        if (!r) {
          co_await err(r.error().code, r.error().what);
          co_return;
        }
      }
      co_await ok();
    } else {
      co_await err(405, "use GET or DELETE on /all");
    }
    co_return;
  }

  if (parts.size() == 2 && parts[0] == "name") {
    if (req.method != "DELETE") {
      co_await err(405, "use DELETE on /name/{name}");
      co_return;
    }
    std::string name = parts[1];
    auto r = store_.removeIf([&](const config::RuleSpec& s) { return s.name == name; },
                             "name '" + name + "'");
    if (!r)
      co_await err(r.error().code, r.error().what);
    else
      co_await ok();
    co_return;
  }

  // [hosturl/{host}/]externalipaddress/{ip}/port/{port}[/portmax/{pm}]/protocol/{proto}
  size_t i = 0;
  std::optional<std::string> host;
  if (parts.size() >= 2 && parts[0] == "hosturl") {
    host = parts[1] == "any" ? "" : parts[1];
    i = 2;
  }
  if (parts.size() >= i + 6 && parts[i] == "externalipaddress" && parts[i + 2] == "port") {
    std::string ip = parts[i + 1];
    uint64_t port = 0;
    size_t j = i + 4;
    if (parts[j] == "portmax") j += 2;
    if (!net::isIpLiteral(ip)) {
      co_await err(400, "invalid externalipaddress '" + ip + "'");
      co_return;
    }
    if (!net::parseUint(parts[i + 3], 65535, port) || port == 0) {
      co_await err(400, "invalid port '" + parts[i + 3] + "'");
      co_return;
    }
    if (parts.size() != j + 2 || parts[j] != "protocol") {
      co_await err(404, "no such API path: " + req.path);
      co_return;
    }
    std::string proto = parts[j + 1];
    auto model = req.queryParam("model_name");
    auto prefix = req.queryParam("path_prefix");
    auto match = req.queryParam("path_match_mode");
    auto pred = [&](const config::RuleSpec& s) {
      return s.vip == ip && s.port == port && s.protocol == proto &&
             (!model || s.model_name == *model) && (!host || s.host == *host) &&
             (!prefix || s.path_prefix == *prefix) && (!match || s.path_match_mode == *match);
    };
    std::string what = ip + ":" + std::to_string(port) + "/" + proto +
                       (model ? " model_name '" + *model + "'" : "");
    if (req.method == "DELETE") {
      auto r = store_.removeIf(pred, what);
      if (!r)
        co_await err(r.error().code, r.error().what);
      else
        co_await ok();
    } else if (req.method == "GET") {
      nlohmann::json out = {{"lbAttr", nlohmann::json::array()}};
      for (auto& r : store_.rules())
        if (pred(r)) out["lbAttr"].push_back(ruleJson(r));
      if (out["lbAttr"].empty())
        co_await err(404, "no-rule error: no rule matches " + what);
      else
        co_await w.send(200, "application/json", out.dump());
    } else {
      co_await err(405, "use GET or DELETE on a rule path");
    }
    co_return;
  }
  co_await err(404, "no such API path: " + req.path);
}

}  // namespace kvgate::admin
