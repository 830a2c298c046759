// The unified selection law of Tier 1.5 (seed 000, "The unified selection law"): choose among a
// rule's healthy endpoints from each one's cache overlap with the prompt, its load and its KV
// capacity. Pure: no clock, no index, no endpoint state; the KV-exact stage gathers the inputs.
//
// Modes (kvLbMode on the rule, else LOXILB_KV_LB_MODE, else predict-q on kvExactMode 3 rules and
// predict on P/D rules; see parseLawMode):
//  - off: overlap argmax.
//  - hard (the seed's default; ours on P/D rules until predict): capacity-weighted bounded load.
//    cap_i = ceil(f * L * capacity_i / C) with
//    f = mean_load_factor_pct / 100 (default 175 = 1.75, i.e. epsilon 0.75), L the total load and
//    C the total capacity over the candidates. The affinity set is the candidates with positive
//    overlap; among its members under their cap (load_i < cap_i) the highest overlap wins.
//    Saturated (every affinity member at or over its cap): the least-loaded affinity member.
//    Negligible overlap (no candidate overlaps at all): the least-loaded under-cap candidate.
//  - soft: argmin of cost_i = (prompt_blocks - overlap_i) * 1000 + lambda * load_i / capacity_i,
//    lambda 32 by default; at zero load this is the overlap argmax.
//  - adaptive: hard with the factor f_eff(L) = clamp(175 + 125 * (L - 16) / 10, 175, 300) / 100.
//  - adaptive-soft: soft with lambda_eff(L) = clamp(50000 + 5000 * (L - 16), 50000, 100000).
//  - taper (an extension, not in the seed): hard with f_eff(m) = clamp(3.0 - 1.75 * (m - 2) / 14,
//    1.25, 3.0), m = (L + 1) / candidates the mean in-flight load per endpoint, this request
//    counted: loose (3.0) while the workers are nearly idle, where a spill costs a full prefill
//    and buys nothing, tight (1.25) from 16 requests per endpoint on, where imbalance is queueing.
//    The seed's adaptive law moves the other way (175 -> 300 as L grows); the fleet benchmark
//    measured a 1.25 cap beating every arm at saturation (docs/benchmarks.md).
//  - ttft (an extension, not in the seed; not the default: measured worse than hard at
//    saturation, docs/benchmarks.md): argmin of an estimated time to first token in prefill
//    blocks, cost_i = pending_i + miss_weight * uncached_i + load_blocks * load_i, with
//    uncached_i = max(prompt_blocks - overlap_i, 0) and pending_i the uncached blocks of the
//    streams this gateway sent to i that have not received their first byte yet (a non-streaming
//    answer has no first byte before its last token: not counted; nor are requests Tier 1.5
//    could not key (warm-up, no tokenizer, a prompt under one block) or other rules' requests to
//    the same engine). miss_weight 8.0
//    (LOXILB_KV_TTFT_MISS_WEIGHT_PCT, default 800): the request's own prefill plus the compute
//    it takes from the requests queued behind it and the cache it costs (2.0 spilled a fifth of
//    the requests at saturation in the fleet benchmark and lost a tenth of the hit rate).
//    load_blocks 2 (LOXILB_KV_TTFT_LOAD_BLOCKS): a running sequence slows each engine step by
//    about a third of a prefill block's compute in the step model, and a first token waits a few
//    steps. A prompt nobody holds is a Tier 1.5 miss, as under hard: placing a new prefix by the
//    queue of the moment unbalanced the fleet in the benchmark (its siblings follow it for good),
//    while the rule's round-robin spreads new prefixes evenly.
//
//  - predict (an extension; the default of P/D rules, and of kvExactMode 3 rules from issue 29
//    until predict-q, below, replaced it): on a prompt some
//    candidate holds, argmin of (uncached_i + 1) x (load_i + 1) / share_i: the request's new
//    prefill there (its uncached blocks plus its last token) times the batch it joins (the
//    requests in flight there, this one counted), relative to the endpoint's share of KV capacity
//    (share_i = capacity_i / the candidates' mean capacity, so kvCapacityBlocks and the
//    controller's weight count as under hard; 1 when all are equal or unknown). This is LMetric's
//    new prefill x batch (the lmetric peer arm below) with capacity shares; unlike LMetric, a
//    prompt nobody holds is the seed's Tier 1.5 miss (the rule's selector places it, round-robin
//    by default; cold-start seeding still diverts every Nth hit): placing it by the load of the
//    moment (LMetric's rule) measured 1.5x worse at GSP 40/s and 1.2x at 80/s, and adding the
//    queued prefill to the first factor spread prompts away from their cache under overload (hit
//    rate 72 % against 90 % at GSP 80/s; docs/benchmarks.md "routing v2"). The product keeps a long
//    session home until the home's batch is about (its prefill elsewhere) / (its prefill at home)
//    times another's, a bound on decode concentration by requests where the ttft and soft laws have
//    none. Ties: more overlap, then less load, then the first candidate at or after a cursor the
//    caller advances per decision. The batch factor's offset (1: the request itself) is
//    LOXILB_KV_PREDICT_BATCH_OFFSET (1..64): a larger one weighs load less against the cache
//    (b: (uncached_i + 1) x (load_i + b)). LOXILB_KV_PREDICT_DECODE_WEIGHT_PCT (0..100, w): a
//    stream whose first token was relayed (its prefill done: it costs a new prefill a decode token
//    per step, not a queue) counts w/100 of a batch slot, any other in-flight request a whole
//    one: load_i = (load_i - started_i) + w/100 x started_i. A prompt cut before tokenizing
//    (LOXILB_KV_TOKENIZE_MAX_BYTES, or past 8192 blocks) counts its cut tail as uncached everywhere
//    (kv_exact adds the tokenizer's estimate to prompt_blocks), so a long session's home is not
//    mistaken for a full hit.
//  - predict-q (an extension; the default of kvExactMode 3 rules, measured against predict and
//    the peers over seeds in docs/benchmarks.md "predict-q over seeds"): predict on a
//    prompt some candidate holds; a prompt nobody holds goes to the candidate with the least
//    queued prefill (pending_blocks: uncached blocks of streams sent there not yet started; on
//    P/D rules, of prefill legs not yet answered),
//    ties to less load, then the candidate at or after the rotating cursor, instead of falling
//    through to the rule's selector.
//
// Peer re-implementations, from their published descriptions (shared/reference/peers.md), over
// the same candidates; a prompt nobody holds is decided by the same formula (overlap 0); their
// prompt_blocks includes a cut prompt's tail, as predict's does:
//  - lmetric (LMetric, arXiv 2603.15202, adopted by Dynamo): argmin of new prefill blocks x batch
//    size = (prompt_blocks - overlap_i + 1) x (load_i + 1): the + 1 block is the prompt's last
//    token, computed even on a full hit (so load still counts), and the batch counts the request
//    being routed (as the caps above do), so idle endpoints still differ by what they compute.
//  - dynamo (NVIDIA Dynamo's KV router cost): argmin of prefill_load_scale x max(prompt_blocks -
//    overlap_i, 0) + decode_blocks_i, with prefill_load_scale 1 and overlap credit 1 (GPU tier).
//    decode_blocks_i = active_blocks: the distinct blocks of the requests this gateway has in
//    flight on i with this prompt's added (Dynamo's ActiveSequences: shared prefixes count once);
//    Dynamo splits active blocks between prefill and decode, which a proxy that does not see the
//    engine's phases cannot do: all count in the decode term here.
//  - dynamo-v1 (Dynamo 1.x's KV cost, routing-concepts and configuration-and-tuning pages of its
//    docs, defaults): argmin of prefill_load_scale x max(active_prefill_i + prompt_blocks -
//    overlap_credit_i, 0) + decode_blocks_i with scale 1, device credit 1 (host 0.75 and disk
//    0.25 tiers: none here) and the credit decay off (its default 0): pending_blocks_i + uncached_i
//    + active_blocks_i, active prefill = the uncached blocks of the streams this gateway sent there
//    that have not started to stream (Dynamo's active prefill tokens, released at the first output
//    token, as here). Its predicted-on-route side index is our speculative insert (kv_exact).
//  - llm-d (llm-d Router's default profile): argmax of 2 x queue + 2 x kv-utilization + 3 x prefix,
//    queue_i = (max_w - w_i) / (max_w - min_w) over the engines' waiting requests (1 for all when
//    equal or unknown), kv_i = 1 - KV usage (1 when unknown), prefix_i = the matched blocks
//    normalized min-max across the candidates ((m - min) / (max - min); 1 for all when equal, 0
//    when nobody matches), as llm-d's precise scorer does. Its picker breaks ties at random;
//    here least load, then lowest index, as everywhere. The router's older default profile.
//  - llm-d-sticky (llm-d Router v1.0's default since 2026-08, "sticky until saturated";
//    shared/reference/peers.md): the prefix-cache-affinity filter keeps the candidates whose
//    prefix score (overlap / prompt blocks) is >= 0.8 and whose token load is at most tau; the
//    token-load scorer ranks by uncached prefill tokens in flight plus this request's uncached
//    tokens, token_load_i = pending_i + uncached_i (in blocks here: pending_blocks is what this
//    gateway sent there that has not started to stream); the pick is the least token load in
//    the filtered set, or over every candidate when the filter keeps none (affinity dropped).
//    tau = peak prefill throughput x max TTFT penalty, calibrated once per hardware in llm-d;
//    here LOXILB_KV_STICKY_TAU_TOKENS, default 286,720 (their example: 20,480 tokens/s x 14 s).
// Ties everywhere (but predict's, above): least load, then lowest index.
// Spill relief (the capped laws: hard, adaptive, taper; on by default for single-pool rules;
// predict, ttft and soft leave affinity by their cost instead): when the pick is over its cap (the
// saturated case), move to the least-loaded under-cap candidate of the whole set, zero-overlap
// ones included. A pick that is not the overlap argmax is a spill.
//
// Decisions the seed leaves open, made here: the request being routed counts in the caps' total
// load (otherwise every cap is 0 at zero load and affinity is lost), while the adaptive laws
// keep the seed's L = sum of loads (so L <= 16 is exactly static hard/soft); the negligible-overlap
// refinement applies when no candidate overlaps at all (with positive overlaps the affinity set
// decides, and only spill relief leaves it: P/D rules, relief off by default, stay on their
// affinity members); cold-start seeding is the caller's (it runs after the law); load is this
// gateway's in-flight count per endpoint; capacity is in KV blocks (the engine's num_gpu_blocks
// from /metrics or the endpoint's kvCapacityBlocks, not scaled by the endpoint weight; unknown
// capacity counts as the mean of the known ones, or 1 when none is known); soft's lambda of 32 and
// adaptive-soft's floor of 50,000 disagree at the anchor: both are implemented as stated (the fleet
// benchmark shows what each does).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvgate::routing {

enum class LawMode : uint8_t {
  kOff,
  kHard,
  kSoft,
  kAdaptive,
  kAdaptiveSoft,
  kTaper,     // an extension: hard with a cap factor that tightens as the workers fill
  kTtft,      // an extension: argmin of estimated time to first token (queued prefill + own)
  kPredict,   // an extension: new prefill x batch / capacity share
  kPredictQ,  // an extension: predict, and a prompt nobody holds to the least queued prefill
              // (equal queues: the endpoint picked least recently); the default of mode 3 rules
  // Re-implementations of peers' published policies over the same inputs (not their code):
  kLmetric,     // "lmetric"
  kDynamo,      // "dynamo" (its cost before 1.x: no queued prefill)
  kDynamoV1,    // "dynamo-v1" (Dynamo 1.x's KV cost)
  kLlmd,        // "llm-d" (the older weighted profile)
  kLlmdSticky,  // "llm-d-sticky" (llm-d's current default)
};

// True for the peer re-implementations: they decide on every request, a prompt nobody holds
// included (their formulas have a miss rule of their own), so Tier 1.5's no_worker and shallow
// guards do not apply to them.
inline bool isPeerLaw(LawMode m) {
  return m == LawMode::kLmetric || m == LawMode::kDynamo || m == LawMode::kDynamoV1 ||
         m == LawMode::kLlmd ||
         m == LawMode::kLlmdSticky;
}


// True for the laws that place a prompt nobody holds themselves (the peer laws, predict-q): no
// Tier 1.5 miss falls through to the rule's selector under them.
inline bool placesMisses(LawMode m) { return isPeerLaw(m) || m == LawMode::kPredictQ; }

// A law name (lawModeName's); nullopt for anything else.
std::optional<LawMode> parseLawMode(std::string_view s);
std::string_view lawModeName(LawMode m);

struct LawCandidate {
  uint32_t overlap = 0;  // leading blocks of the prompt the endpoint holds
  uint32_t load = 0;     // in-flight requests (this gateway's count)
  double capacity = 0;   // KV blocks; 0 = unknown
  // Peer laws only (and ttft's pending_blocks):
  uint64_t active_blocks = 0;  // dynamo: distinct blocks in flight there, this prompt's added
  int64_t waiting = -1;        // llm-d: the engine's waiting requests (/metrics); -1 unknown
  double kv_usage = -1;        // llm-d: the engine's KV-cache usage 0..1 (/metrics); -1 unknown
  // ttft and llm-d-sticky: uncached blocks of streams sent there still awaiting their first byte.
  uint64_t pending_blocks = 0;
  // predict's decode weight: how many of `load` are event streams whose first token was relayed
  // (past their prefill, decoding); the rest (queued, prefilling, or non-streaming answers, whose
  // first byte comes at their end) count whole.
  uint32_t started = 0;
  // The endpoint's prefill throughput estimated online (endpoints/prefill_rate.h), tokens/s;
  // 0 unknown (the prefix_affinity filter's tauSeconds).
  double prefill_rate = 0;
  // When this gateway last gave it a request (steady ns; 0 never): predict-q's miss rule.
  int64_t last_pick_ns = 0;
};

// What the laws (and the scoring parts that reproduce them) count over a candidate set: the
// in-flight requests (the seed's L, without the request being routed) and the KV capacities,
// unknown capacity counting as the mean of the known ones, or 1 when none is known.
struct FleetTotals {
  double load_sum = 0;
  double cap_default = 1;
  double cap_total = 0;
  double capacity(const LawCandidate& x) const { return x.capacity > 0 ? x.capacity : cap_default; }
};
inline FleetTotals fleetTotals(std::span<const LawCandidate> c) {
  FleetTotals t;
  double known = 0, cap_known = 0;
  for (const auto& x : c) {
    t.load_sum += x.load;
    if (x.capacity > 0) {
      cap_known += x.capacity;
      ++known;
    }
  }
  if (known > 0) t.cap_default = cap_known / known;
  for (const auto& x : c) t.cap_total += t.capacity(x);
  return t;
}
// The cap factors of the capped laws: adaptive's by the seed's L (the loads, this request not
// counted), taper's by the mean in-flight load per candidate with this request counted.
inline double adaptiveCapFactor(double load_sum) {
  return std::clamp(175 + 125 * (load_sum - 16) / 10, 175.0, 300.0) / 100.0;
}
inline double taperCapFactor(double load_total, size_t candidates) {
  return std::clamp(3.0 - 1.75 * (load_total / static_cast<double>(candidates) - 2) / 14, 1.25,
                    3.0);
}
// adaptive-soft's lambda by the seed's L.
inline double adaptiveSoftLambda(double load_sum) {
  return std::clamp(50000 + 5000 * (load_sum - 16), 50000.0, 100000.0);
}

// The predict laws' batch at an endpoint: its in-flight requests, a stream past its first token
// counting `decode_weight` (0..1) of one; a started count over the load is capped at the load.
inline double predictBatch(const LawCandidate& c, double decode_weight) {
  const double started = static_cast<double>(std::min(c.started, c.load));
  return static_cast<double>(c.load) - started + decode_weight * started;
}

struct LawParams {
  LawMode mode = LawMode::kHard;
  uint32_t mean_load_factor_pct = 175;  // hard: (1 + epsilon) * 100
  double soft_lambda = 32;
  uint32_t prompt_blocks = 0;  // blocks of the prompt, a cut tail included (all but hard's family)
  bool spill_relief = true;
  double ttft_miss_weight = 8.0;  // ttft: weight of the request's own uncached blocks
  double ttft_load_blocks = 2.0;  // ttft: blocks of cost per in-flight request
  uint64_t sticky_tau_tokens = 286'720;  // llm-d-sticky: token load that drops affinity
  uint32_t predict_batch_offset = 1;     // predict, predict-q: the batch factor (load + offset)
  // predict, predict-q: weight of a started stream (100: none; the gateway's default, 50, is
  // RoutingEnv's)
  uint32_t predict_decode_weight_pct = 100;
  uint32_t block_tokens = 16;            // tokens per block (llm-d-sticky's tau in blocks)
  uint64_t rotate = 0;  // predict: a cursor the caller advances per decision (last tie-break)
};

struct LawResult {
  int index = -1;         // the pick (-1: no candidates)
  bool spilled = false;   // the pick is not the overlap argmax
  double factor = 0;      // the cap factor used (hard, adaptive)
  double lambda = 0;      // the lambda used (soft, adaptive-soft)
  uint32_t uncached = 0;  // the pick's uncached blocks (prompt_blocks - overlap, >= 0)
};

LawResult applyLaw(std::span<const LawCandidate> c, const LawParams& p);

}  // namespace kvgate::routing
