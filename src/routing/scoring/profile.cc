#include "routing/scoring/profile.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>

#include "common/splitmix.h"
#include "routing/scoring/registry.h"

namespace kvgate::routing::scoring {
namespace {

// Per-decision arrays on the stack for pools up to kInline endpoints, on the heap beyond.
constexpr size_t kInline = 64;
template <typename T>
struct Buffer {
  std::array<T, kInline> inline_{};
  std::vector<T> heap;
  std::span<T> get(size_t n) {
    if (n <= kInline) return std::span<T>(inline_.data(), n);
    heap.assign(n, T{});
    return std::span<T>(heap);
  }
};

}  // namespace

Result<std::shared_ptr<const ScoringProfile>> ScoringProfile::build(
    const config::ScoringProfileSpec& s) {
  auto p = std::make_shared<ScoringProfile>();
  p->spec_ = s;
  p->salt_ = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  p->reads_active_ = s.readsActive();
  for (const auto& f : s.filters) {
    FilterFactory make = findFilter(f.name);
    if (!make) return fail(400, "kvScoringProfile", "this build has no filter '" + f.name + "'");
    p->filters_.push_back(make(f));
  }
  for (const auto& sc : s.scorers) {
    ScorerFactory make = findScorer(sc.name);
    if (!make) return fail(400, "kvScoringProfile", "this build has no scorer '" + sc.name + "'");
    p->scorers_.emplace_back(sc.weight, make(sc));
  }
  if (p->scorers_.empty()) return fail(400, "kvScoringProfile", "a profile needs a scorer");
  return std::shared_ptr<const ScoringProfile>(std::move(p));
}

void ScoringProfile::evaluate(const ScoringRequest& req, std::span<uint8_t> keep,
                              std::span<uint8_t> prev, std::span<double> total,
                              std::span<double> tmp) const {
  std::fill(keep.begin(), keep.end(), uint8_t{1});
  for (const auto& f : filters_) {
    std::copy(keep.begin(), keep.end(), prev.begin());
    f->apply(req, keep);
    if (std::find(keep.begin(), keep.end(), uint8_t{1}) == keep.end())
      std::copy(prev.begin(), prev.end(), keep.begin());  // a filter never empties the set
  }
  std::fill(total.begin(), total.end(), 0.0);
  for (const auto& [weight, scorer] : scorers_) {
    if (weight <= 0) continue;
    scorer->score(req, keep, tmp);
    for (size_t i = 0; i < keep.size(); ++i)
      if (keep[i]) total[i] += weight * tmp[i];
  }
}

std::vector<double> ScoringProfile::totals(std::span<const LawCandidate> c,
                                           const LawParams& p) const {
  const size_t n = c.size();
  std::vector<uint8_t> keep(n), prev(n);
  std::vector<double> total(n), tmp(n);
  evaluate({c, p.prompt_blocks, p.block_tokens}, keep, prev, total, tmp);
  for (size_t i = 0; i < n; ++i)
    if (!keep[i]) total[i] = -std::numeric_limits<double>::infinity();
  return total;
}

LawResult ScoringProfile::pick(std::span<const LawCandidate> c, const LawParams& p) const {
  LawResult r;
  const size_t n = c.size();
  if (n == 0) return r;
  const ScoringRequest req{c, p.prompt_blocks, p.block_tokens};
  Buffer<uint8_t> keep_buf, prev_buf;
  Buffer<double> total_buf, tmp_buf;
  std::span<uint8_t> keep = keep_buf.get(n), prev = prev_buf.get(n);
  std::span<double> total = total_buf.get(n), tmp = tmp_buf.get(n);
  evaluate(req, keep, prev, total, tmp);
  int b = -1;
  if (spec_.picker == config::ScoringProfileSpec::Picker::kRandom) {
    double sum = 0;
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i)
      if (keep[i]) {
        sum += std::max(0.0, total[i]);
        ++kept;
      }
    common::SplitMix64 rng{(p.rotate ^ salt_) * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL};
    const double u = rng.uniform();  // (0, 1)
    if (sum > 0) {
      double at = u * sum;
      for (size_t i = 0; i < n && b < 0; ++i) {
        if (!keep[i]) continue;
        at -= std::max(0.0, total[i]);
        if (at < 0) b = static_cast<int>(i);
      }
    } else {
      size_t k = std::min(kept - 1, static_cast<size_t>(u * static_cast<double>(kept)));
      for (size_t i = 0; i < n && b < 0; ++i)
        if (keep[i] && k-- == 0) b = static_cast<int>(i);
    }
    if (b < 0)  // rounding left u * sum at the end: the last kept candidate with a score
      for (size_t i = n; i-- > 0 && b < 0;)
        if (keep[i] && (sum <= 0 || total[i] > 0)) b = static_cast<int>(i);
  } else {
    auto turn = [&](size_t i) { return (i + n - static_cast<size_t>(p.rotate % n)) % n; };
    for (size_t i = 0; i < n; ++i) {
      if (!keep[i]) continue;
      if (b < 0) {
        b = static_cast<int>(i);
        continue;
      }
      const size_t k = static_cast<size_t>(b);
      bool wins;
      if (total[i] != total[k])
        wins = total[i] > total[k];
      else if (c[i].overlap != c[k].overlap) wins = c[i].overlap > c[k].overlap;
      else if (c[i].load != c[k].load) wins = c[i].load < c[k].load;
      else wins = turn(i) < turn(k);
      if (wins) b = static_cast<int>(i);
    }
  }
  r.index = b;
  uint32_t best_overlap = 0;
  for (const auto& x : c) best_overlap = std::max(best_overlap, x.overlap);
  r.spilled = c[static_cast<size_t>(b)].overlap < best_overlap;
  r.uncached = req.uncached(static_cast<size_t>(b));
  return r;
}

}  // namespace kvgate::routing::scoring
