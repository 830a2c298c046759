// The simulator's auxiliary endpoints: runtime faults (/sim/fault and the flags' JSON form),
// /v1/models, /metrics (vLLM names) and /v1/embeddings.
#include <xxhash.h>

#include <cmath>

#include "common/ids.h"
#include "common/json_depth.h"
#include "common/log.h"
#include "sim/request_ctx.h"
#include "sim/wire.h"

namespace kvgate::sim {
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

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
    } else if (key == "kv_drop_batches") {
      if (!getInt(v, 0, kMax, x)) return "'kv_drop_batches' must be an integer >= 0";
      n.kv_drop_batches = x;
    } else if (key == "kv_restart") {
      if (!v.is_boolean()) return "'kv_restart' must be a boolean";
      n.kv_restart = v.get<bool>();
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

Result<void> Worker::setFaults(const FaultState& next) {
  if (next.refuse_connections && !faults_.refuse_connections) {
    server_.pauseAccepting();
  } else if (!next.refuse_connections && faults_.refuse_connections) {
    auto r = server_.resumeAccepting();
    if (!r) return tl::unexpected(r.error());
  }
  if ((next.kv_drop_batches > 0 || next.kv_restart) && !kvEvents())
    return fail(400, "fault", "kv_drop_batches and kv_restart need --kv-events");
  faults_ = next;
  for (auto& rank : ranks_) {  // actions, taken now, on every data-parallel engine
    if (!rank->pub) continue;
    if (next.kv_drop_batches > 0) rank->pub->dropNext(static_cast<uint64_t>(next.kv_drop_batches));
    if (next.kv_restart) {
      rank->cache.clearUnreferenced();  // a restarted engine starts with an empty cache
      rank->pub->restart();
    }
  }
  faults_.kv_drop_batches = 0;
  faults_.kv_restart = false;
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

// vLLM (vllm/entrypoints/serve/tokenize/): POST /tokenize takes a completion form {model?,
// prompt: str, add_special_tokens=true, return_token_strs=false} or a chat form {model?,
// messages, add_generation_prompt=true, continue_final_message=false, add_special_tokens=false,
// chat_template_kwargs, tools, return_token_strs} (other members ignored) and answers {count,
// max_model_len, tokens, token_strs (null unless asked)}; POST /detokenize {model?, tokens}
// answers {prompt}, special tokens kept, clean-up as the model's config says. SGLang also at
// /v1/...: {tokens, count, max_model_len} for a prompt (or a list of them), {text} with
// skip_special_tokens=true by default and no clean-up. Errors in vLLM's shape.
asio::awaitable<void> Worker::handleTokenize(http::Request& req, http::ResponseWriter& w,
                                             const http::HeaderList& hdrs, bool detokenize) {
  ++tokenize_total_;
  const bool sglang = cfg_.engine == "sglang";
  int status = 200;
  std::string body;
  auto bad = [&](int s, const std::string& msg, const char* param = nullptr) {
    status = s;
    body = vllmError(s, msg, param);
  };
  const auto j = jsonDepthWithin(req.body) ? ojson::parse(req.body, nullptr, false) : ojson();
  std::string model = cfg_.models.front();
  // vLLM's validate_json_request: the lower-cased Content-Type before any ';', spaces kept.
  std::string ct = req.header("Content-Type");
  ct = ct.substr(0, ct.find(';'));
  for (char& c : ct) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto flag = [&](const char* name, bool dflt, bool& out) {
    auto it = j.find(name);
    if (it == j.end()) return out = dflt, true;
    if (!it->is_boolean()) return false;
    return out = it->get<bool>(), true;
  };
  if (!sglang && ct != "application/json") {
    bad(400, "Unsupported Media Type: Only 'application/json' is allowed");
  } else if (j.is_discarded() || !j.is_object()) {
    bad(400, "Request body must be a JSON object.");
  } else if (auto m = j.find("model");
             m != j.end() && !m->is_null() && !sglang &&
             (!m->is_string() || std::find(cfg_.models.begin(), cfg_.models.end(),
                                           m->get<std::string>()) == cfg_.models.end())) {
    bad(404,
        "The model `" + (m->is_string() ? m->get<std::string>() : m->dump()) + "` does not exist.",
        "model");
  } else {
    if (m != j.end() && m->is_string()) model = m->get<std::string>();
    if (std::find(cfg_.models.begin(), cfg_.models.end(), model) == cfg_.models.end())
      model = cfg_.models.front();  // (SGLang does not check the name)
    const Tokenizer& tk = tokenizerFor(model);
    ojson out = ojson::object();
    if (detokenize) {
      std::vector<uint32_t> ids;
      auto t = j.find("tokens");
      bool ok = t != j.end() && t->is_array();
      for (size_t i = 0; ok && i < t->size(); ++i) {
        const auto& v = (*t)[i];
        ok = v.is_number_unsigned() && v.get<uint64_t>() <= UINT32_MAX;
        if (ok) ids.push_back(v.get<uint32_t>());
      }
      bool skip = false;
      if (!ok) {
        bad(400, "'tokens' must be a list of token ids in [0, 2^32).", "tokens");
      } else if (sglang && !flag("skip_special_tokens", true, skip)) {
        bad(400, "skip_special_tokens must be a boolean.", "skip_special_tokens");
      } else {
        auto text =
            tk.decode(ids, skip, sglang ? std::optional<bool>(false) : cfg_.detokenize_clean_up);
        if (!text)
          bad(text.error().code, text.error().what);
        else
          out[sglang ? "text" : "prompt"] = *text;
      }
    } else {
      const bool has_prompt = j.contains("prompt"), has_messages = j.contains("messages");
      bool special = true, strs = false;
      std::vector<uint32_t> ids;
      if (!sglang && j.contains("return_token_strs") && !j["return_token_strs"].is_null()) {
        if (j["return_token_strs"].is_boolean())
          strs = j["return_token_strs"].get<bool>();
        else
          bad(400, "return_token_strs must be a boolean.", "return_token_strs");
      }
      if (status != 200) {
      } else if (has_prompt == has_messages) {
        bad(400, "Give either 'prompt' or 'messages'.");
      } else if (has_prompt) {
        if (!j["prompt"].is_string() || !flag("add_special_tokens", true, special))
          bad(400, "'prompt' must be a string and add_special_tokens a boolean.", "prompt");
        else
          ids = tk.encode(j["prompt"].get<std::string>(), special);
      } else if (j.contains("chat_template") && !j["chat_template"].is_null()) {
        bad(400,
            "Chat template is passed with request, but --trust-request-chat-template is "
            "not set. Refused request with untrusted chat template.");
      } else {
        ojson chat = ojson::object();
        for (const char* k : {"messages", "add_generation_prompt", "continue_final_message",
                              "add_special_tokens", "chat_template_kwargs", "tools"})
          if (auto it = j.find(k); it != j.end()) chat[k] = *it;
        const std::string raw = chat.dump();
        auto r = tk.encodeChat(raw, nlohmann::json::parse(raw));
        if (!r)
          bad(400, r.error().what);
        else
          ids = std::move(*r);
      }
      if (status == 200) {
        const size_t n = ids.size();
        ojson strs_j = nullptr;
        if (strs) {
          strs_j = ojson::array();
          for (uint32_t id : ids) {
            auto s = tk.tokenString(id);
            strs_j.push_back(s ? ojson(*s) : ojson(nullptr));
          }
        }
        if (sglang) {
          out["tokens"] = std::move(ids);
          out["count"] = n;
          out["max_model_len"] = cfg_.max_model_len;
        } else {
          out["count"] = n;
          out["max_model_len"] = cfg_.max_model_len;
          out["tokens"] = std::move(ids);
          out["token_strs"] = std::move(strs_j);
        }
      }
    }
    if (status == 200) body = dumpJson(out);
  }
  co_await w.send(status, "application/json", body, hdrs);
}

// The pooling APIs in vLLM's shapes (embeddings, rerank, score, classify): one forward pass over
// the inputs, timed like a prefill of their tokens, answered with deterministic values (a seeded
// hash of each input's ids) and vLLM's usage (prompt tokens; rerank: total_tokens only). A
// rerank or score pair is its query's and its document's tokens together, as the engine feeds it.
asio::awaitable<void> Worker::handlePooling(http::Request& req, http::ResponseWriter& w,
                                            const http::HeaderList& hdrs, PoolingApi api) {
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
  const auto& tk = tokenizerFor(model);
  // A string, a list of strings, or (embeddings) token id lists: one id list per input.
  auto readInputs = [&](const json* v, bool ids_ok, std::vector<std::vector<uint32_t>>& out) {
    if (!v) return false;
    if (v->is_string()) {
      out.push_back(tk.encode(v->get_ref<const std::string&>()));
      return true;
    }
    if (!v->is_array() || v->empty()) return false;
    if (ids_ok && (*v)[0].is_number()) {
      out.emplace_back();
      return tokenList(*v, out.back());
    }
    for (const auto& item : *v) {
      out.emplace_back();
      if (item.is_string())
        out.back() = tk.encode(item.get_ref<const std::string&>());
      else if (!ids_ok || !item.is_array() || !tokenList(item, out.back()))
        return false;
    }
    return true;
  };
  auto member = [&](const char* name) -> const json* {
    auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  // What is scored: each input (embeddings, classify) or each query-document pair.
  std::vector<std::vector<uint32_t>> inputs;
  if (api == PoolingApi::kEmbeddings || api == PoolingApi::kClassify) {
    if (!readInputs(member("input"), true, inputs)) {
      co_await bad(400, "'input' must be a string, a list of strings, or token id lists.", "input");
      co_return;
    }
  } else {
    const bool rerank = api == PoolingApi::kRerank;
    std::vector<std::vector<uint32_t>> left, right;
    if (!readInputs(member(rerank ? "query" : "text_1"), false, left) ||
        !readInputs(member(rerank ? "documents" : "text_2"), false, right) ||
        (rerank && (!member("query")->is_string() || !member("documents")->is_array())) ||
        (left.size() != 1 && left.size() != right.size())) {
      co_await bad(400,
                   rerank ? "'query' must be a string and 'documents' a list of strings."
                          : "'text_1' and 'text_2' must be strings or lists of strings, "
                            "text_1 of one item or as many as text_2.",
                   rerank ? "documents" : "text_2");
      co_return;
    }
    for (size_t i = 0; i < right.size(); ++i) {
      inputs.push_back(left[left.size() == 1 ? 0 : i]);
      inputs.back().insert(inputs.back().end(), right[i].begin(), right[i].end());
    }
  }
  uint64_t ntok = 0;
  for (const auto& t : inputs) ntok += t.size();
  if (!co_await sleepFor(ctx, cfg_.prefill_base_ms +
                                  static_cast<double>(ntok) * cfg_.prefill_us_per_token / 1e3)) {
    abortRequest(w);
    co_return;
  }
  prompt_tokens_ += ntok;
  auto unit = [](SplitMix64& rng) {
    return static_cast<double>(rng.next() >> 11) / 9007199254740992.0;  // [0, 1)
  };
  ojson resp;
  if (api == PoolingApi::kRerank) {
    std::vector<std::pair<double, size_t>> order;
    for (size_t i = 0; i < inputs.size(); ++i) {
      SplitMix64 rng{cfg_.seed ^ XXH3_64bits(inputs[i].data(), inputs[i].size() * 4)};
      order.emplace_back(unit(rng), i);
    }
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    size_t top = order.size();
    if (auto n = member("top_n"); n && n->is_number_integer() && n->get<int64_t>() > 0)
      top = std::min<size_t>(top, static_cast<size_t>(n->get<int64_t>()));
    const json& docs = *member("documents");
    ojson results = ojson::array();
    for (size_t k = 0; k < top; ++k) {
      const size_t i = order[k].second;
      results.push_back({{"index", i},
                         {"document", {{"text", docs[i].get<std::string>()}}},
                         {"relevance_score", order[k].first}});
    }
    resp = {{"id", "rerank-" + newRequestId()},
            {"model", model},
            {"usage", {{"prompt_tokens", ntok}, {"total_tokens", ntok}}},
            {"results", std::move(results)}};
  } else {
    ojson data = ojson::array();
    for (size_t i = 0; i < inputs.size(); ++i) {
      SplitMix64 rng{cfg_.seed ^ XXH3_64bits(inputs[i].data(), inputs[i].size() * 4)};
      if (api == PoolingApi::kScore) {
        data.push_back({{"index", i}, {"object", "score"}, {"score", unit(rng)}});
      } else if (api == PoolingApi::kClassify) {
        const double p = unit(rng);
        data.push_back({{"index", i},
                        {"label", p >= 0.5 ? "LABEL_0" : "LABEL_1"},
                        {"probs", ojson::array({p, 1 - p})},
                        {"num_classes", 2}});
      } else {
        std::array<float, 8> v{};
        double norm = 0;
        for (float& x : v) {
          x = static_cast<float>(unit(rng) * 2 - 1);
          norm += static_cast<double>(x) * x;
        }
        norm = norm > 0 ? std::sqrt(norm) : 1;
        for (float& x : v) x = static_cast<float>(x / norm);
        ojson emb = ojson::array();
        for (float x : v) emb.push_back(x);
        bool b64 = false;
        if (auto f = member("encoding_format"); f && f->is_string())
          b64 = f->get<std::string>() == "base64";
        if (b64) emb = base64(reinterpret_cast<const unsigned char*>(v.data()), sizeof v);
        data.push_back({{"index", i}, {"object", "embedding"}, {"embedding", emb}});
      }
    }
    const char* prefix = api == PoolingApi::kScore      ? "score-"
                         : api == PoolingApi::kClassify ? "classify-"
                                                        : "embd-";
    resp = {{"id", prefix + newRequestId()},
            {"object", "list"},
            {"created", unixNow()},
            {"model", model},
            {"data", data}};
    resp["usage"] = {{"prompt_tokens", ntok},
                     {"total_tokens", ntok},
                     {"completion_tokens", 0},
                     {"prompt_tokens_details", nullptr}};
  }
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
  size_t running = running_, waiting = waiters_.size(), used = 0, capacity = 0;
  uint64_t preemptions = 0;
  for (const auto& rank : ranks_) {
    used += rank->cache.usedBlocks() + rank->cache.reservedBlocks();
    capacity += rank->cache.capacity();
    if (!cfg_.fixed_timing) {
      running += rank->engine.running();
      waiting += rank->engine.waiting();
      preemptions += rank->engine.preemptions();
    }
  }
  addMetric(out, "vllm:num_requests_running", "gauge",
            "Number of requests in model execution batches.", labels, d(running));
  addMetric(out, "vllm:num_requests_waiting", "gauge",
            "Number of requests waiting to be processed.", labels, d(waiting));
  addMetric(out, "vllm:num_preemptions_total", "counter",
            "Cumulative number of preemption from the engine.", labels, d(preemptions));
  double usage = capacity ? d(used) / d(capacity) : 0.0;
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
  // One sample per data-parallel engine under one HELP/TYPE.
  addMetric(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
            "block_size=\"" + std::to_string(ranks_[0]->cache.blockSize()) +
                "\",enable_prefix_caching=\"True\",engine=\"0\",num_gpu_blocks=\"" +
                std::to_string(ranks_[0]->cache.capacity()) + "\"",
            1.0);
  for (size_t r = 1; r < ranks_.size(); ++r)
    out += "vllm:cache_config_info{block_size=\"" + std::to_string(ranks_[r]->cache.blockSize()) +
           "\",enable_prefix_caching=\"True\",engine=\"" + std::to_string(r) +
           "\",num_gpu_blocks=\"" + std::to_string(ranks_[r]->cache.capacity()) + "\"} 1\n";
  addMetric(out, "kvgate_sim_requests_total", "counter",
            "Inference requests received by the simulated worker.", labels, d(requests_total_));
  addMetric(out, "kvgate_sim_tokenize_requests_total", "counter",
            "/tokenize and /detokenize calls answered by the simulated worker.", labels,
            d(tokenize_total_));
  addMetric(out, "kvgate_sim_requests_aborted_total", "counter",
            "Requests whose client disconnected before completion.", labels, d(requests_aborted_));
  if (role_ != Role::kBoth) {
    addMetric(out, "kvgate_sim_pd_refused_total", "counter",
              "P/D legs refused: not this worker's role or dialect, or no prefilled blocks.",
              labels, d(pd_refused_));
    addMetric(out, "kvgate_sim_pd_pulled_total", "counter",
              "Decode: prefilled blocks pulled from a prefill worker and installed.", labels,
              d(pd_pulled_));
    addMetric(
        out, "kvgate_sim_pd_held", "gauge", "Prefill: requests whose blocks wait for their decode.",
        labels,
        cfg_.pd_exchange ? (cfg_.pd_exchange->sweep(), d(cfg_.pd_exchange->heldBy(index_))) : 0.0);
  }
  addMetric(out, "kvgate_sim_faults_injected_total", "counter",
            "Faults injected (failed, stalled, cut or delayed requests).", labels,
            d(faults_injected_));
  addMetric(out, "kvgate_sim_steps_total", "counter",
            "Engine steps run (--timing step), all data-parallel ranks.", labels, d(steps_));
  addMetric(out, "kvgate_sim_timer_slip_seconds_total", "counter",
            "Simulated seconds by which engine steps overran their deadline because the timer "
            "fired late (a busy machine); divide by kvgate_sim_steps_total for the mean.",
            labels, slip_sum_s_);
  addMetric(out, "kvgate_sim_timer_slip_max_seconds", "gauge",
            "Largest timer slip of one engine step, simulated seconds.", labels, slip_max_s_);
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

}  // namespace kvgate::sim
