// RequestTokenizer: see request_tokenizer.h.
#include "tokenizer/request_tokenizer.h"

#include <array>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/env.h"
#include "common/log.h"
#include "metrics/families.h"
#include "metrics/text.h"
#include "tokenizer/chat.h"
#include "tokenizer/incremental.h"

namespace kvgate::tok {

using routing::TokensStatus;

RequestTokenizer::RequestTokenizer(TokenizerRegistry& registry, RequestTokenizerOptions opts)
    : registry_(registry), opts_(opts), loaded_(std::make_shared<const Map>()) {
  thread_ = std::thread([this] { loaderLoop(); });
}

RequestTokenizer::~RequestTokenizer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

RequestTokenizerOptions RequestTokenizer::optionsFromEnv() {
  RequestTokenizerOptions o;
  o.max_bytes = static_cast<size_t>(common::envInt("LOXILB_KV_TOKENIZE_MAX_BYTES", 1024,
                                                   64LL * 1024 * 1024,
                                                   static_cast<int64_t>(o.max_bytes)));
  return o;
}

std::string RequestTokenizer::renderMetrics() const {
  metrics::TextWriter w;
  w.header(metrics::kPromptTokenizer);
  for (auto [event, v] : {std::pair<const char*, uint64_t>{"loaded", stats_.loaded.load()},
                          {"load_failed", stats_.load_failures.load()},
                          {"truncated", stats_.truncated.load()},
                          {"too_large", stats_.too_large.load()},
                          {"queue_full", stats_.queue_full.load()}})
    w.sample(metrics::kPromptTokenizer, {{"event", event}}, static_cast<double>(v));
  return w.str();
}

uint32_t RequestTokenizer::needs() const {
  return routing::kNeedModel | routing::kNeedPromptText | routing::kNeedMessages |
         routing::kNeedChatInput;
}

std::shared_ptr<const Tokenizer> RequestTokenizer::find(std::string_view model) const {
  {
    std::shared_ptr<const Map> m = loaded_.load(std::memory_order_acquire);
    if (auto it = m->find(model); it != m->end()) return it->second;
  }
  if (!invalidModelName(model).empty()) return nullptr;  // never a path: not queued
  std::lock_guard<std::mutex> lock(mu_);
  if (queued_.count(model)) return nullptr;
  if (auto it = failed_.find(model); it != failed_.end()) {
    if (std::chrono::steady_clock::now() - it->second < opts_.retry_after) return nullptr;
    failed_.erase(it);
  }
  if (queue_.size() >= kMaxQueued) {
    stats_.queue_full.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  queue_.emplace_back(model);
  queued_.emplace(model);
  cv_.notify_one();
  return nullptr;
}

void RequestTokenizer::loaderLoop() {
  for (;;) {
    std::string model;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      model = std::move(queue_.front());
      queue_.pop_front();
    }
    auto r = registry_.get(model);  // file I/O and parsing: on this thread only
    bool ok = false, failed = false;
    if (r) {
      std::shared_ptr<const Map> cur = loaded_.load(std::memory_order_acquire);
      if (cur->size() < kMaxModels) {
        auto next = std::make_shared<Map>(*cur);
        next->emplace(model, *r);
        loaded_.store(std::move(next), std::memory_order_release);
        stats_.loaded.fetch_add(1, std::memory_order_relaxed);
        log::info("tokenizer", "loaded the tokenizer of " + model + " for KV-exact routing");
        ok = true;
      } else {
        log::warn("tokenizer", "not loading " + model + ": already " +
                                   std::to_string(kMaxModels) + " models loaded");
      }
    } else {
      failed = true;
      log::warn("tokenizer", "KV-exact routing cannot tokenize for " + model + ": " +
                                 r.error().what);
    }
    std::lock_guard<std::mutex> lock(mu_);
    queued_.erase(model);
    if (!ok) {
      if (failed_.size() >= kMaxModels) failed_.clear();  // bounded by client-chosen names
      failed_[model] = std::chrono::steady_clock::now();
    }
    // Counted once the model is no longer queued: whoever sees the count may ask again at once.
    if (failed) stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
  }
}

std::vector<uint32_t> RequestTokenizer::encodeBounded(const std::shared_ptr<const Tokenizer>& t,
                                                      std::string_view text, bool special,
                                                      bool chat, size_t* cut_ids) const {
  bool cut = false;
  if (cut_ids) *cut_ids = 0;
  if (text.size() > opts_.max_bytes) {
    size_t end = opts_.max_bytes;
    const size_t floor = end > 1024 ? end - 1024 : 0;
    size_t ws = text.find_last_of(" \n", end - 1);
    if (ws != std::string_view::npos && ws > floor) {
      end = ws;
    } else {
      while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
    }
    if (cut_ids) *cut_ids = (text.size() - end + 3) / 4 + kTailDrop;
    text = text.substr(0, end);
    cut = true;
    stats_.truncated.fetch_add(1, std::memory_order_relaxed);
  }
  std::vector<uint32_t> ids;
  if (chat && text.size() <= kIncrementalMaxBytes) {
    // Per-thread incremental encoders, holding their tokenizer alive (no stale reference).
    struct Slot {
      std::shared_ptr<const Tokenizer> tok;
      std::unique_ptr<IncrementalEncoder> enc;
    };
    thread_local std::array<Slot, 2> slots;
    thread_local size_t next = 0;
    Slot* s = nullptr;
    for (auto& x : slots)
      if (x.tok == t) s = &x;
    if (!s) {
      s = &slots[next];
      next = (next + 1) % slots.size();
      s->enc.reset();
      s->tok = t;
      s->enc = std::make_unique<IncrementalEncoder>(*t);
    }
    ids = s->enc->encode(text, special);
  } else {
    ids = t->encode(text, special);
  }
  if (cut) ids.resize(ids.size() > kTailDrop ? ids.size() - kTailDrop : 0);
  return ids;
}

TokensStatus RequestTokenizer::tokens(const routing::RequestFacts& f,
                                      std::vector<uint32_t>& out, size_t* cut) const {
  out.clear();
  if (cut) *cut = 0;
  const bool chat = f.hasChat() || f.chat_too_large;
  if (!chat && f.prompt_text.empty()) return TokensStatus::kTextEmpty;
  if (!f.has_model || f.model.empty()) return TokensStatus::kModelEmpty;
  std::shared_ptr<const Tokenizer> t = find(f.model);
  if (!t) return TokensStatus::kNotLoaded;
  if (!chat) {
    out = encodeBounded(t, f.prompt_text, f.add_special_tokens.value_or(true), false, cut);
    return TokensStatus::kOk;
  }
  // Bounded work on the caller's event loop: a chat request larger than twice the text bound
  // (the facts parser did not convert it), or with more than kMaxMessages messages, is not
  // rendered (a `tokenize` miss).
  if (!f.hasChat()) {
    stats_.too_large.fetch_add(1, std::memory_order_relaxed);
    return TokensStatus::kFailed;
  }
  // The template's input as the facts parser converted it in its one walk of the body.
  const nlohmann::ordered_json& j = *f.chat;
  if (const auto it = j.find("messages"); it != j.end() && it->size() > kMaxMessages) {
    stats_.too_large.fetch_add(1, std::memory_order_relaxed);
    return TokensStatus::kFailed;
  }
  auto in = chatInputFromRequest(
      j, t->templateWantsContentParts() ? ContentFormat::kOpenAI : ContentFormat::kString);
  if (!in) return TokensStatus::kFailed;
  auto text = renderChat(*t, *in);
  if (!text) return TokensStatus::kFailed;
  out = encodeBounded(t, *text, in->add_special_tokens, true, cut);
  return TokensStatus::kOk;
}

}  // namespace kvgate::tok
