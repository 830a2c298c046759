// RequestTokenizer: the token ids of a request's prompt on the data plane, as the engine computes
// them (routing::PromptTokens for Tier 1.5).
//
// Completions: the "prompt" string, encoded with add_special_tokens (default true, as vLLM's
// completions API). Chat: "messages" plus the template fields (tools, documents,
// add_generation_prompt, continue_final_message, chat_template_kwargs) rendered with the model's
// chat template, then encoded with add_special_tokens (default false), as tok::encodeChat.
//
// Never blocks an event loop: the tokenizer of a model is looked up in a lock-free snapshot
// (atomic shared_ptr to an immutable map); a model not loaded yet is queued for the loader
// thread and the request is answered kNotLoaded (Tier 1.5 then falls through with reason
// `tokenize`) until the load completes. Failed loads are retried after `retry_after`.
// Bounds: at most `max_bytes` of prompt text (LOXILB_KV_TOKENIZE_MAX_BYTES, default 128 KiB,
// about 32k English tokens, ~1.6 ms at 80 MB/s and ~20 ms for the worst 100 KB inputs measured
// in docs/benchmarks.md) is tokenized: a longer text is cut at a space or newline near the
// bound and the last kTailDrop ids are dropped (the cut can change how the final words split),
// so only leading blocks are keyed. A chat request whose raw messages and template fields exceed
// twice the bound, or hold more than kMaxMessages messages, is not rendered at all (the render
// and its JSON parse would otherwise cost the event loop time in proportion to the body). At most kMaxQueued models wait for loading, at most
// kMaxModels are loaded. Chat texts up to kIncrementalMaxBytes use a per-thread incremental
// encoder (tokenizer/incremental.h: turn N+1 reuses turn N's ids), at most two models per thread.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "routing/prompt_tokens.h"
#include "tokenizer/registry.h"

namespace kvgate::tok {

struct RequestTokenizerOptions {
  size_t max_bytes = 128 * 1024;
  std::chrono::milliseconds retry_after{30000};  // a failed or missing model is asked again after
};

class RequestTokenizer : public routing::PromptTokens {
 public:
  static constexpr size_t kTailDrop = 32;
  static constexpr size_t kMaxQueued = 64;
  static constexpr size_t kMaxModels = 256;
  static constexpr size_t kIncrementalMaxBytes = 64 * 1024;
  static constexpr size_t kMaxMessages = 4096;  // chat messages rendered per request

  explicit RequestTokenizer(TokenizerRegistry& registry, RequestTokenizerOptions opts = {});
  ~RequestTokenizer() override;
  RequestTokenizer(const RequestTokenizer&) = delete;
  RequestTokenizer& operator=(const RequestTokenizer&) = delete;

  uint32_t needs() const override;
  routing::TokensStatus tokens(const routing::RequestFacts& f, std::vector<uint32_t>& out,
                               size_t* cut = nullptr) const override;
  size_t textBound() const override { return opts_.max_bytes; }

  // The model's tokenizer when loaded; otherwise queues a load (unless one is queued, or the
  // last attempt failed less than retry_after ago) and returns null. Never blocks on I/O.
  std::shared_ptr<const Tokenizer> find(std::string_view model) const;

  struct Stats {
    std::atomic<uint64_t> loaded{0}, load_failures{0}, truncated{0}, queue_full{0}, too_large{0};
  };
  const Stats& stats() const { return stats_; }
  // Prometheus text of kvgate_kv_prompt_tokenizer_total.
  std::string renderMetrics() const;
  // Options from the environment (LOXILB_KV_TOKENIZE_MAX_BYTES: 1024..67108864).
  static RequestTokenizerOptions optionsFromEnv();

 private:
  using Map = std::map<std::string, std::shared_ptr<const Tokenizer>, std::less<>>;
  void loaderLoop();
  // `cut_ids` (not null): the ids the byte bound left out, estimated (PromptTokens::tokens).
  std::vector<uint32_t> encodeBounded(const std::shared_ptr<const Tokenizer>& t,
                                      std::string_view text, bool special, bool chat,
                                      size_t* cut_ids = nullptr) const;

  TokenizerRegistry& registry_;
  RequestTokenizerOptions opts_;
  mutable std::atomic<std::shared_ptr<const Map>> loaded_;
  mutable std::mutex mu_;  // guards the fields below; never held while loading
  mutable std::condition_variable cv_;
  mutable std::deque<std::string> queue_;
  mutable std::set<std::string, std::less<>> queued_;
  mutable std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> failed_;
  bool stop_ = false;
  mutable Stats stats_;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace kvgate::tok
