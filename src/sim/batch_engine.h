// BatchEngine: one simulated engine's continuous-batching scheduler (vLLM v1-like), with no I/O
// and no clock: plan() says what the next step runs and how long it takes (sim/step_model.h),
// finish() applies it. The worker drives it from a timer (sim/worker.cc); tests drive it by hand.
//
// A step (plan):
//   1. Running sequences, oldest admitted first: a sequence whose prompt is computed decodes one
//      token; one still in prefill takes a chunk of what remains (chunked prefill). Each needs
//      the KV blocks its tokens grow into; when none is free the most recently admitted running
//      sequence is preempted (its blocks freed, back to the front of the queue, recomputed on
//      readmission, as vLLM's recompute preemption) until the block is found or the sequence
//      itself was preempted.
//   2. Waiting sequences, first come first served, while the step has room: admission takes the
//      prompt's blocks from the prefix cache (the cached prefix is a hit: it is not computed
//      again) plus the blocks outside it (partial tail, tokens generated before a preemption,
//      the next token). A head that does not fit waits, and so does everything behind it.
//   Limits: at most max_num_seqs sequences and max_batched_tokens new tokens per step.
// finish(): chunks advance; a sequence whose prompt became fully computed, or that decoded,
// produces one token; at max_tokens it is done and its blocks are released (the prompt's stay
// cached, evictable, tail first).
//
// A hit is capped as vLLM caps it: the last prompt token is always recomputed (to produce
// logits), rounded down to whole blocks, so a fully cached 32-token prompt computes 16 tokens.
// Aborted sequences (client gone) leave at the next plan() with their blocks released.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "sim/prefix_cache.h"
#include "sim/step_model.h"

namespace kvgate::sim {

struct EngineLimits {
  size_t max_num_seqs = 256;         // vLLM --max-num-seqs
  size_t max_batched_tokens = 8192;  // vLLM --max-num-batched-tokens
};

struct Seq {
  std::vector<uint32_t> prompt;
  std::vector<uint64_t> keys;  // the prompt's full-block chain (PrefixCache::blockKeys)
  int64_t max_tokens = 1;

  // Engine state (read by the worker; written by the engine).
  enum class State { kWaiting, kRunning, kDone } state = State::kWaiting;
  bool aborted = false;      // set by the worker: leaves at the next plan()
  size_t cached_tokens = 0;  // prefix hit at the first admission (usage.cached_tokens)
  bool admitted_once = false;
  size_t computed = 0;    // tokens in the KV cache
  size_t target = 0;      // tokens to compute before the next output token
  int64_t generated = 0;  // output tokens produced
  uint64_t preemptions = 0;
  PrefixCache::Allocation alloc;  // prompt blocks referenced in the cache
  bool has_alloc = false;
  size_t reserved = 0;                 // blocks held outside the cache
  std::function<void()> wake;          // called when generated grows or the sequence ends
  std::function<void(Seq&)> on_admit;  // called at each admission (KV events, metrics)

  size_t kvLength() const { return prompt.size() + static_cast<size_t>(generated); }
};

// One step's work: (sequence, new tokens) pairs, its shape and duration.
struct StepPlan {
  struct Item {
    std::shared_ptr<Seq> seq;
    size_t new_tokens = 0;
  };
  std::vector<Item> items;
  StepShape shape;
  double ms = 0;
  bool empty() const { return items.empty(); }
};

class BatchEngine {
 public:
  BatchEngine(PrefixCache& cache, EngineLimits limits, StepParams params);

  // False (nothing queued) when the sequence could never fit: more blocks than the whole cache.
  bool submit(std::shared_ptr<Seq> seq);
  bool idle() const { return running_.empty() && waiting_.empty(); }
  StepPlan plan();
  void finish(const StepPlan& plan);

  // The longest leading run of `keys` that a sequence waiting for admission shares: blocks this
  // engine will hold once it admits them (the benchmark oracle's view of queued work).
  size_t queuedLeadingBlocks(const std::vector<uint64_t>& keys) const;
  size_t running() const { return running_.size(); }
  size_t waiting() const { return waiting_.size(); }
  uint64_t preemptions() const { return preemptions_; }
  const StepParams& params() const { return params_; }
  void setParams(const StepParams& p) { params_ = p; }
  // Blocks that hold kv_tokens tokens.
  size_t blocksFor(size_t kv_tokens) const { return (kv_tokens + bs_ - 1) / bs_; }

 private:
  void release(Seq& s);
  void end(Seq& s);
  bool admit(Seq& s);
  bool growTo(Seq& s, size_t kv_tokens);  // reserve blocks so s holds kv_tokens (+ next)
  void preempt(const std::shared_ptr<Seq>& s);
  void dropAborted();

  PrefixCache& cache_;
  EngineLimits limits_;
  StepParams params_;
  size_t bs_;
  std::vector<std::shared_ptr<Seq>> running_;  // admission order
  std::deque<std::shared_ptr<Seq>> waiting_;
  uint64_t preemptions_ = 0;
};

}  // namespace kvgate::sim
