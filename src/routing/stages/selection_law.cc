#include "routing/stages/selection_law.h"

#include <algorithm>
#include <cmath>

namespace kvgate::routing {

std::optional<LawMode> parseLawMode(std::string_view s) {
  if (s == "off") return LawMode::kOff;
  if (s == "hard") return LawMode::kHard;
  if (s == "soft") return LawMode::kSoft;
  if (s == "adaptive") return LawMode::kAdaptive;
  if (s == "adaptive-soft") return LawMode::kAdaptiveSoft;
  if (s == "taper") return LawMode::kTaper;
  if (s == "ttft") return LawMode::kTtft;
  if (s == "lmetric") return LawMode::kLmetric;
  if (s == "dynamo") return LawMode::kDynamo;
  if (s == "dynamo-v1") return LawMode::kDynamoV1;
  if (s == "llm-d") return LawMode::kLlmd;
  if (s == "llm-d-sticky") return LawMode::kLlmdSticky;
  if (s == "predict") return LawMode::kPredict;
  if (s == "predict-q") return LawMode::kPredictQ;
  return std::nullopt;
}

std::string_view lawModeName(LawMode m) {
  switch (m) {
    case LawMode::kOff:
      return "off";
    case LawMode::kHard:
      return "hard";
    case LawMode::kSoft:
      return "soft";
    case LawMode::kAdaptive:
      return "adaptive";
    case LawMode::kAdaptiveSoft:
      return "adaptive-soft";
    case LawMode::kTaper:
      return "taper";
    case LawMode::kTtft:
      return "ttft";
    case LawMode::kLmetric:
      return "lmetric";
    case LawMode::kDynamo:
      return "dynamo";
    case LawMode::kDynamoV1:
      return "dynamo-v1";
    case LawMode::kLlmd:
      return "llm-d";
    case LawMode::kLlmdSticky:
      return "llm-d-sticky";
    case LawMode::kPredict:
      return "predict";
    case LawMode::kPredictQ:
      return "predict-q";
  }
  return "hard";
}

namespace {

// a is better than b: higher overlap, then less load, then lower index.
bool moreAffine(std::span<const LawCandidate> c, size_t a, size_t b) {
  if (c[a].overlap != c[b].overlap) return c[a].overlap > c[b].overlap;
  if (c[a].load != c[b].load) return c[a].load < c[b].load;
  return a < b;
}
// a is better than b: less load, then lower index.
bool lessLoaded(std::span<const LawCandidate> c, size_t a, size_t b) {
  if (c[a].load != c[b].load) return c[a].load < c[b].load;
  return a < b;
}

template <typename Pred, typename Better>
int best(std::span<const LawCandidate> c, Pred in, Better better) {
  int b = -1;
  for (size_t i = 0; i < c.size(); ++i)
    if (in(i) && (b < 0 || better(c, i, static_cast<size_t>(b)))) b = static_cast<int>(i);
  return b;
}

double clampd(double v, double lo, double hi) { return std::min(hi, std::max(lo, v)); }

// The candidate with the lowest (or, with `maximize`, highest) score; ties: less load, lower
// index.
template <typename Score>
int extremum(std::span<const LawCandidate> c, Score score, bool maximize) {
  int b = -1;
  double bs = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double s = score(i);
    const bool better = b < 0 || (maximize ? s > bs : s < bs) ||
                        (s == bs && lessLoaded(c, i, static_cast<size_t>(b)));
    if (better) {
      b = static_cast<int>(i);
      bs = s;
    }
  }
  return b;
}

// Blocks of the prompt the candidate does not hold (prompt_blocks - overlap, at least 0).
uint32_t uncachedBlocks(const LawParams& p, const LawCandidate& x) {
  return p.prompt_blocks > x.overlap ? p.prompt_blocks - x.overlap : 0;
}

LawResult peerLaw(std::span<const LawCandidate> c, const LawParams& p, int argmax) {
  LawResult r;
  auto uncached = [&](size_t i) { return double(uncachedBlocks(p, c[i])); };
  if (p.mode == LawMode::kLmetric) {
    // The prompt's last token is always computed (a full hit still prefills it): + 1 block.
    r.index = extremum(
        c, [&](size_t i) { return (uncached(i) + 1) * (double(c[i].load) + 1); }, false);
  } else if (p.mode == LawMode::kDynamo) {
    r.index = extremum(
        c, [&](size_t i) { return uncached(i) + double(c[i].active_blocks); }, false);
  } else if (p.mode == LawMode::kDynamoV1) {
    // Dynamo 1.x: the prefill term counts the prompt work already queued there too.
    r.index = extremum(
        c,
        [&](size_t i) {
          return double(c[i].pending_blocks) + uncached(i) + double(c[i].active_blocks);
        },
        false);
  } else if (p.mode == LawMode::kLlmdSticky) {
    const double tau = double(p.sticky_tau_tokens) / double(std::max<uint32_t>(1, p.block_tokens));
    auto token_load = [&](size_t i) { return double(c[i].pending_blocks) + uncached(i); };
    auto affine = [&](size_t i) {
      return p.prompt_blocks > 0 && double(c[i].overlap) >= 0.8 * double(p.prompt_blocks) &&
             token_load(i) <= tau;
    };
    // Least token load, then less load, then lower index.
    auto lighter = [&](std::span<const LawCandidate> cs, size_t a, size_t b) {
      if (token_load(a) != token_load(b)) return token_load(a) < token_load(b);
      return lessLoaded(cs, a, b);
    };
    r.index = best(c, affine, lighter);
    if (r.index < 0) r.index = best(c, [](size_t) { return true; }, lighter);
  } else {  // llm-d
    int64_t wmin = -1, wmax = -1;
    for (const auto& x : c) {
      if (x.waiting < 0) continue;
      wmin = wmin < 0 ? x.waiting : std::min(wmin, x.waiting);
      wmax = std::max(wmax, x.waiting);
    }
    auto queue = [&](size_t i) {
      if (c[i].waiting < 0 || wmax <= wmin) return 1.0;
      return double(wmax - c[i].waiting) / double(wmax - wmin);
    };
    auto kv = [&](size_t i) { return c[i].kv_usage < 0 ? 1.0 : 1.0 - clampd(c[i].kv_usage, 0, 1); };
    // llm-d's precise prefix scorer normalizes the matched blocks min-max across the pods:
    // (m - min) / (max - min), 1 for all when equal (and 0 for all when nobody matches).
    uint32_t omin = UINT32_MAX, omax = 0;
    for (const auto& x : c) {
      omin = std::min(omin, x.overlap);
      omax = std::max(omax, x.overlap);
    }
    auto prefix = [&](size_t i) {
      if (omax == 0) return 0.0;
      if (omax == omin) return 1.0;
      return double(c[i].overlap - omin) / double(omax - omin);
    };
    r.index = extremum(
        c, [&](size_t i) { return 2 * queue(i) + 2 * kv(i) + 3 * prefix(i); }, true);
  }
  r.spilled = r.index != argmax && c[static_cast<size_t>(argmax)].overlap > 0;
  return r;
}

}  // namespace

// The law itself; applyLaw adds what every mode reports about its pick.
static LawResult applyLawInner(std::span<const LawCandidate> c, const LawParams& p);

LawResult applyLaw(std::span<const LawCandidate> c, const LawParams& p) {
  LawResult r = applyLawInner(c, p);
  if (r.index >= 0) r.uncached = uncachedBlocks(p, c[static_cast<size_t>(r.index)]);
  return r;
}

static LawResult applyLawInner(std::span<const LawCandidate> c, const LawParams& p) {
  LawResult r;
  if (c.empty()) return r;
  auto all = [](size_t) { return true; };
  const int argmax = best(c, all, moreAffine);
  // Load: the seed's L (sum of the candidates' loads) keys the adaptive laws; the caps count the
  // request being routed too. Capacities: unknown = mean of the known ones, or 1.
  const FleetTotals totals = fleetTotals(c);
  const double load_sum = totals.load_sum;
  const double load_total = load_sum + 1;
  auto capacity = [&](size_t i) { return totals.capacity(c[i]); };
  const double cap_total = totals.cap_total;

  switch (p.mode) {
    case LawMode::kOff:
      r.index = argmax;
      return r;
    case LawMode::kLmetric:
    case LawMode::kDynamo:
    case LawMode::kDynamoV1:
    case LawMode::kLlmd:
    case LawMode::kLlmdSticky:
      return peerLaw(c, p, argmax);
    case LawMode::kTtft: {
      r.index = extremum(
          c,
          [&](size_t i) {
            return double(c[i].pending_blocks) +
                   p.ttft_miss_weight * double(uncachedBlocks(p, c[i])) +
                   p.ttft_load_blocks * double(c[i].load);
          },
          false);
      r.spilled = r.index != argmax && c[static_cast<size_t>(argmax)].overlap > 0;
      return r;
    }
    case LawMode::kPredictQ:
      if (c[static_cast<size_t>(argmax)].overlap == 0) {
        // Nobody holds it: the least queued prefill. Among equal queues with prefill queued,
        // the endpoint picked least recently (its queued prefill started first, so it ends
        // first: round-robin's order when the prompts are alike; by in-flight count instead, a
        // prompt waited behind a prefill that had just started while another was about to end:
        // 1.05-1.25x round-robin's TTFT p90 on nosharing at 40/s); among empty queues (it
        // starts at once anywhere) the less loaded, which keeps a new group off a busy group's
        // home (round-robin's order there: 2.5x the TTFT p90 on one GSP seed at 10/s); then
        // the cursor.
        const size_t n = c.size();
        auto turn = [&](size_t i) { return (i + n - static_cast<size_t>(p.rotate % n)) % n; };
        auto before = [&](size_t i, size_t b) {
          if (c[i].pending_blocks != c[b].pending_blocks)
            return c[i].pending_blocks < c[b].pending_blocks;
          if (c[i].pending_blocks > 0 && c[i].last_pick_ns != c[b].last_pick_ns)
            return c[i].last_pick_ns < c[b].last_pick_ns;
          if (c[i].load != c[b].load) return c[i].load < c[b].load;
          return turn(i) < turn(b);
        };
        for (size_t i = 0; i < n; ++i)
          if (r.index < 0 || before(i, static_cast<size_t>(r.index))) r.index = static_cast<int>(i);
        return r;
      }
      [[fallthrough]];
    case LawMode::kPredict: {
      // The batch counts relative to the endpoint's share of KV capacity (capacity x the external
      // controller's weight; unknown = the mean): an engine twice the mean size carries a batch
      // twice as large for the same cost.
      const double cap_mean = cap_total / static_cast<double>(c.size());
      // The batch: started streams (decoding) weigh predict_decode_weight_pct / 100, any other
      // in-flight request a whole slot. (Tried: the credit on the prompt's one home only, equal
      // holders told apart by their whole load; no better on agentic sessions, worse on mooncake.)
      const double dw = double(p.predict_decode_weight_pct) / 100.0;
      auto cost = [&](size_t i) {
        return (double(uncachedBlocks(p, c[i])) + 1) *
               (predictBatch(c[i], dw) + double(p.predict_batch_offset)) * cap_mean / capacity(i);
      };
      // Ties: more overlap (keep the cache), then less load, then the candidate after the
      // caller's rotating cursor (equal holders of a shared prefix take turns).
      const size_t n = c.size();
      auto turn = [&](size_t i) { return (i + n - static_cast<size_t>(p.rotate % n)) % n; };
      auto wins = [&](size_t i, size_t b) {
        if (c[i].overlap != c[b].overlap) return c[i].overlap > c[b].overlap;
        if (c[i].load != c[b].load) return c[i].load < c[b].load;
        return turn(i) < turn(b);
      };
      double bs = 0;
      for (size_t i = 0; i < n; ++i) {
        const double s = cost(i);
        if (r.index < 0 || s < bs || (s == bs && wins(i, static_cast<size_t>(r.index)))) {
          r.index = static_cast<int>(i);
          bs = s;
        }
      }
      // (a tie among equal holders broken by the cursor is not a spill)
      r.spilled = c[static_cast<size_t>(r.index)].overlap < c[static_cast<size_t>(argmax)].overlap;
      return r;
    }
    case LawMode::kSoft:
    case LawMode::kAdaptiveSoft: {
      r.lambda = p.mode == LawMode::kSoft ? p.soft_lambda : adaptiveSoftLambda(load_sum);
      r.index = extremum(
          c,
          [&](size_t i) {
            return double(uncachedBlocks(p, c[i])) * 1000 + r.lambda * c[i].load / capacity(i);
          },
          false);
      r.spilled = r.index != argmax && c[static_cast<size_t>(argmax)].overlap > 0;
      return r;
    }
    case LawMode::kHard:
    case LawMode::kAdaptive:
    case LawMode::kTaper:
      break;
  }
  if (p.mode == LawMode::kHard) {
    r.factor = p.mean_load_factor_pct / 100.0;
  } else if (p.mode == LawMode::kAdaptive) {
    r.factor = adaptiveCapFactor(load_sum);
  } else {  // taper: by the mean load per candidate, this request counted
    r.factor = taperCapFactor(load_total, c.size());
  }
  // ceil of a product that is an integer in exact arithmetic must not round up a float error.
  auto cap = [&](size_t i) {
    return std::ceil(r.factor * load_total * capacity(i) / cap_total - 1e-9);
  };
  auto under = [&](size_t i) { return c[i].load < cap(i); };
  if (c[static_cast<size_t>(argmax)].overlap == 0) {  // negligible overlap: no affinity at all
    int b = best(c, under, lessLoaded);
    r.index = b >= 0 ? b : best(c, all, lessLoaded);
    return r;
  }
  auto affine = [&](size_t i) { return c[i].overlap > 0; };
  int b = best(
      c, [&](size_t i) { return affine(i) && under(i); }, moreAffine);
  if (b < 0) {  // saturated: every affinity member is at or over its cap
    b = best(c, affine, lessLoaded);
    if (p.spill_relief) {
      int relief = best(c, under, lessLoaded);
      if (relief >= 0) b = relief;
    }
  }
  r.index = b;
  r.spilled = b != argmax;
  return r;
}

}  // namespace kvgate::routing
