// The parts of a scoring profile (routing/scoring/profile.h): filters drop candidates, scorers
// score the candidates left. Both read the same per-candidate signals the selection laws read
// (LawCandidate: overlap, in-flight load, KV capacity, the engine's waiting requests and KV
// usage, queued prefill blocks) and the request's prompt length; both are pure and stateless.
//
// Which parts read the active blocks (the data plane then tracks each request's chain) is said
// once, in config/scoring_profile.cc's tables.
//
// Adding a scorer: one file under scorers/ (its algorithm in a comment at the top, a class
// deriving Scorer, a factory), one line in registry.cc, its name and parameters in
// config/scoring_profile.cc's scorerInfos(), and its test in scoring_test.cc
// (docs/ARCHITECTURE.md, "Adding a scorer").
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>

#include "routing/stages/selection_law.h"

namespace kvgate::routing::scoring {

// What every part sees of one decision.
struct ScoringRequest {
  std::span<const LawCandidate> c;  // the candidates left after exclusion (health, breaker, ...)
  uint32_t prompt_blocks = 0;       // the prompt's blocks, a cut tail included
  uint32_t block_tokens = 16;       // tokens per block
  uint32_t uncached(size_t i) const {
    return prompt_blocks > c[i].overlap ? prompt_blocks - c[i].overlap : 0;
  }
};

class Scorer {
 public:
  virtual ~Scorer() = default;
  // out[i] in [0, 1] for every i with keep[i] (higher is better); others are not read.
  // Normalizations across candidates (min-max) run over the kept ones.
  virtual void score(const ScoringRequest& r, std::span<const uint8_t> keep,
                     std::span<double> out) const = 0;
};

class Filter {
 public:
  virtual ~Filter() = default;
  // Clears keep[i] for the candidates it drops (the profile restores the set when a filter
  // would drop every candidate: a filter narrows, it never empties).
  virtual void apply(const ScoringRequest& r, std::span<uint8_t> keep) const = 0;
};

// Min-max normalization helper: out[i] = (v_i - lo) / (hi - lo) over the kept candidates, or
// 1 - that when `lower_is_better`; 1 for all when they are equal.
template <typename Value>
void minMax(std::span<const uint8_t> keep, std::span<double> out, Value v, bool lower_is_better) {
  double lo = 0, hi = 0;
  bool any = false;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (!keep[i]) continue;
    const double x = v(i);
    lo = any ? std::min(lo, x) : x;
    hi = any ? std::max(hi, x) : x;
    any = true;
  }
  for (size_t i = 0; i < keep.size(); ++i) {
    if (!keep[i]) continue;
    if (hi <= lo) {
      out[i] = 1;
      continue;
    }
    const double s = (v(i) - lo) / (hi - lo);
    out[i] = lower_is_better ? 1 - s : s;
  }
}

}  // namespace kvgate::routing::scoring
