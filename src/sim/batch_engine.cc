#include "sim/batch_engine.h"

#include <algorithm>

namespace kvgate::sim {

BatchEngine::BatchEngine(PrefixCache& cache, EngineLimits limits, StepParams params)
    : cache_(cache),
      limits_(limits),
      params_(params),
      bs_(cache.blockSize() == 0 ? 1 : cache.blockSize()) {
  if (limits_.max_num_seqs == 0) limits_.max_num_seqs = 1;
  if (limits_.max_batched_tokens == 0) limits_.max_batched_tokens = 1;
}

bool BatchEngine::submit(std::shared_ptr<Seq> seq) {
  // Its largest footprint: the prompt and every output token but the last in the KV cache.
  const size_t most =
      seq->prompt.size() + static_cast<size_t>(std::max<int64_t>(seq->max_tokens, 1));
  if (blocksFor(most) > cache_.capacity() || seq->prompt.empty()) return false;
  seq->state = Seq::State::kWaiting;
  waiting_.push_back(std::move(seq));
  return true;
}

size_t BatchEngine::queuedLeadingBlocks(const std::vector<uint64_t>& keys) const {
  size_t best = 0;
  for (const auto& s : waiting_) {
    if (s->aborted) continue;
    size_t n = 0;
    while (n < keys.size() && n < s->keys.size() && keys[n] == s->keys[n]) ++n;
    best = std::max(best, n);
  }
  return best;
}

void BatchEngine::release(Seq& s) {
  if (s.has_alloc) cache_.release(s.alloc);
  s.has_alloc = false;
  s.alloc = {};
  cache_.unreserve(s.reserved);
  s.reserved = 0;
}

void BatchEngine::end(Seq& s) {
  release(s);
  s.state = Seq::State::kDone;
}

bool BatchEngine::admit(Seq& s) {
  const size_t full = s.keys.size();
  const size_t blocks = blocksFor(s.kvLength() + 1);
  const size_t outside = blocks > full ? blocks - full : 0;
  if (cache_.blocksNeeded(s.keys) + outside > cache_.freeBlocks()) return false;
  s.alloc = cache_.acquireKeys(s.keys);
  s.has_alloc = true;
  if (!cache_.reserve(outside)) {  // cannot happen after the check above; stay consistent anyway
    release(s);
    return false;
  }
  s.reserved = outside;
  const size_t plen = s.prompt.size();
  const size_t max_hit = plen > 0 ? ((plen - 1) / bs_) * bs_ : 0;
  const size_t hit = std::min(s.alloc.cached_tokens, max_hit);
  if (!s.admitted_once) s.cached_tokens = hit;
  s.admitted_once = true;
  s.computed = hit;
  s.target = s.kvLength();
  s.state = Seq::State::kRunning;
  if (s.on_admit) s.on_admit(s);
  return true;
}

bool BatchEngine::growTo(Seq& s, size_t kv_tokens) {
  const size_t want = blocksFor(kv_tokens);
  const size_t have = s.keys.size() + s.reserved;
  if (want <= have) return true;
  if (!cache_.reserve(want - have)) return false;
  s.reserved += want - have;
  return true;
}

void BatchEngine::preempt(const std::shared_ptr<Seq>& s) {
  release(*s);
  s->state = Seq::State::kWaiting;
  s->computed = 0;
  ++s->preemptions;
  ++preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), s));
  waiting_.push_front(s);
}

void BatchEngine::dropAborted() {
  for (auto it = running_.begin(); it != running_.end();) {
    if ((*it)->aborted) {
      end(**it);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->aborted) {
      (*it)->state = Seq::State::kDone;
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

StepPlan BatchEngine::plan() {
  dropAborted();
  StepPlan p;
  size_t budget = limits_.max_batched_tokens;
  bool preempted = false;
  // 1. Running sequences, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0 && p.items.size() < limits_.max_num_seqs;) {
    std::shared_ptr<Seq> s = running_[i];
    if (s->computed >= s->target) {  // decode: one token, which may need a new block
      bool self = false;
      while (!growTo(*s, s->computed + 1)) {
        std::shared_ptr<Seq> victim = running_.back();
        preempt(victim);
        preempted = true;
        if (victim == s) {
          self = true;
          break;
        }
      }
      if (self) continue;  // running_[i] is now the next sequence (or past the end)
      p.items.push_back({s, 1});
      p.shape.addDecode(static_cast<double>(s->computed));
      budget -= 1;
    } else {  // a prefill chunk
      const size_t n = std::min(s->target - s->computed, budget);
      p.items.push_back({s, n});
      p.shape.addPrefill(static_cast<double>(n), static_cast<double>(s->computed));
      budget -= n;
    }
    ++i;
  }
  // 2. Waiting sequences, first come first served (not in a step that had to preempt).
  while (!preempted && !waiting_.empty() && budget > 0 && p.items.size() < limits_.max_num_seqs &&
         running_.size() < limits_.max_num_seqs) {
    std::shared_ptr<Seq> s = waiting_.front();
    if (!admit(*s)) break;
    waiting_.pop_front();
    running_.push_back(s);
    const size_t n = std::min(s->target - s->computed, budget);
    p.items.push_back({s, n});
    p.shape.addPrefill(static_cast<double>(n), static_cast<double>(s->computed));
    budget -= n;
  }
  p.ms = p.empty() ? 0 : stepMs(params_, p.shape);
  return p;
}

void BatchEngine::finish(const StepPlan& plan) {
  bool ended = false;
  for (const StepPlan::Item& it : plan.items) {
    Seq& s = *it.seq;
    if (s.aborted || s.state != Seq::State::kRunning) continue;
    s.computed += it.new_tokens;
    if (s.computed < s.target) continue;  // prefill continues next step
    ++s.generated;
    s.target = s.computed;
    if (s.generated >= s.max_tokens) {
      end(s);
      ended = true;
    }
    if (s.wake) s.wake();
  }
  if (ended)
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [](const auto& s) { return s->state == Seq::State::kDone; }),
                   running_.end());
}

}  // namespace kvgate::sim
