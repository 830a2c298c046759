// The selection law, one example of each mode worked by hand (numbers in the comments).
#include "routing/stages/selection_law.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvgate::routing {
namespace {

LawResult run(std::vector<LawCandidate> c, LawParams p) { return applyLaw(c, p); }

TEST(SelectionLaw, OffIsOverlapArgmax) {
  // Overlaps 10, 6, 0: endpoint 0 whatever the load.
  auto r = run({{10, 40, 1000}, {6, 0, 1000}, {0, 0, 2000}}, {LawMode::kOff});
  EXPECT_EQ(r.index, 0);
  EXPECT_FALSE(r.spilled);
  // Tie on overlap: less load wins, then the lower index.
  EXPECT_EQ(run({{5, 3, 1}, {5, 2, 1}, {5, 2, 1}}, {LawMode::kOff}).index, 1);
}

TEST(SelectionLaw, HardCapsByCapacityShare) {
  // Capacities 1000, 1000, 2000 (C = 4000); loads 4, 1, 2 plus this request: L = 8.
  // cap = ceil(1.75 * 8 * cap_i / 4000) = ceil(3.5), ceil(3.5), ceil(7.0) = 4, 4, 7.
  // Endpoint 0 (overlap 10) is at its cap (4 < 4 is false): the under-cap affinity member with
  // the most overlap is endpoint 1 (overlap 6): a spill.
  LawParams p{LawMode::kHard};
  auto r = run({{10, 4, 1000}, {6, 1, 1000}, {0, 2, 2000}}, p);
  EXPECT_EQ(r.index, 1);
  EXPECT_TRUE(r.spilled);
  EXPECT_DOUBLE_EQ(r.factor, 1.75);
  // Loads 3, 1, 2: L = 7, cap_0 = ceil(1.75 * 7 / 4) = ceil(3.06) = 4 > 3: endpoint 0 keeps it.
  r = run({{10, 3, 1000}, {6, 1, 1000}, {0, 2, 2000}}, p);
  EXPECT_EQ(r.index, 0);
  EXPECT_FALSE(r.spilled);
}

TEST(SelectionLaw, HardSaturatedWithAndWithoutRelief) {
  // Loads 4, 4, 0: L = 9; caps ceil(1.75 * 9 / 4) = ceil(3.94) = 4, 4 and ceil(7.88) = 8.
  // Both affinity members (0, 1) are at their cap: saturated. Without relief, the least-loaded
  // affinity member (a tie at 4: the lower index, 0). With relief, the least-loaded under-cap
  // endpoint of the whole set: 2 (overlap 0), a spill.
  std::vector<LawCandidate> c{{10, 4, 1000}, {6, 4, 1000}, {0, 0, 2000}};
  LawParams p{LawMode::kHard};
  p.spill_relief = false;
  auto r = applyLaw(c, p);
  EXPECT_EQ(r.index, 0);
  EXPECT_FALSE(r.spilled);
  p.spill_relief = true;
  r = applyLaw(c, p);
  EXPECT_EQ(r.index, 2);
  EXPECT_TRUE(r.spilled);
}

TEST(SelectionLaw, HardNegligibleOverlapTakesTheLeastLoadedUnderCap) {
  // No overlap anywhere: loads 4, 1, 2 (caps 4, 4, 7 as above): under cap 1 and 2; least loaded 1.
  auto r = run({{0, 4, 1000}, {0, 1, 1000}, {0, 2, 2000}}, {LawMode::kHard});
  EXPECT_EQ(r.index, 1);
  EXPECT_FALSE(r.spilled);
}

TEST(SelectionLaw, SoftPricesMissesAndQueue) {
  // lambda 32, prompt 5 blocks, capacities 10: cost = (5 - overlap) * 1000 + 32 * load / 10.
  // Endpoint 0: 0 + 32 * 400 / 10 = 1280; endpoint 1: 1 * 1000 + 0 = 1000; endpoint 2: 5000.
  LawParams p{LawMode::kSoft};
  p.prompt_blocks = 5;
  auto r = run({{5, 400, 10}, {4, 0, 10}, {0, 0, 10}}, p);
  EXPECT_EQ(r.index, 1);
  EXPECT_TRUE(r.spilled);
  EXPECT_DOUBLE_EQ(r.lambda, 32);
  // At zero load soft is the overlap argmax.
  r = run({{5, 0, 10}, {4, 0, 10}, {0, 0, 10}}, p);
  EXPECT_EQ(r.index, 0);
}

TEST(SelectionLaw, AdaptiveLoosensTheCapWithLoad) {
  // Loads 20, 0: L = 20 (the caps count this request: 21).
  // hard: cap = ceil(1.75 * 21 / 2) = ceil(18.4) = 19 <= 20: spill to endpoint 1.
  // adaptive: factor = clamp(175 + 125 * (20 - 16) / 10, 175, 300) / 100 = 2.25;
  // cap = ceil(2.25 * 21 / 2) = ceil(23.6) = 24 > 20: endpoint 0 keeps its affinity.
  std::vector<LawCandidate> c{{8, 20, 1000}, {2, 0, 1000}};
  auto hard = applyLaw(c, {LawMode::kHard});
  EXPECT_EQ(hard.index, 1);
  auto adaptive = applyLaw(c, {LawMode::kAdaptive});
  EXPECT_EQ(adaptive.index, 0);
  EXPECT_DOUBLE_EQ(adaptive.factor, 2.25);
  // The floor anchor: L = 16 is static hard (1.75); L = 17 loosens: 175 + 12.5 = 187.5.
  EXPECT_DOUBLE_EQ(applyLaw({{{8, 16, 1000}, {2, 0, 1000}}}, {LawMode::kAdaptive}).factor, 1.75);
  EXPECT_DOUBLE_EQ(applyLaw({{{8, 17, 1000}, {2, 0, 1000}}}, {LawMode::kAdaptive}).factor, 1.875);
  // Above the saturation anchor (L >= 26) the factor stops at 3.00: loads 40, 0.
  EXPECT_DOUBLE_EQ(applyLaw({{{8, 40, 1000}, {2, 0, 1000}}}, {LawMode::kAdaptive}).factor, 3.0);
}

TEST(SelectionLaw, CapsAreExactWhereTheProductIsAnInteger) {
  // factor 2.20, five equal capacities, loads 4 x 5 + 4 (this request: +1) = 25: cap =
  // 2.2 * 25 / 5 = 11 exactly (in floating point 11.000000000000002): endpoint 0 at load 11 is
  // at its cap and spills; at load 10 it keeps the request.
  LawParams p{LawMode::kHard};
  p.mean_load_factor_pct = 220;
  std::vector<LawCandidate> c{{9, 11, 1}, {1, 3, 1}, {1, 3, 1}, {1, 3, 1}, {1, 4, 1}};
  EXPECT_EQ(applyLaw(c, p).index, 1);
  c[0].load = 10;
  c[4].load = 5;
  EXPECT_EQ(applyLaw(c, p).index, 0);
}

TEST(SelectionLaw, AdaptiveSoftUsesTheLoadKeyedLambda) {
  // Loads 6, 0: L = 6: lambda = clamp(50000 + 5000 * (6 - 16), 50000, 100000) = 50000.
  // Prompt 3 blocks, capacities 100: endpoint 0 costs 0 + 50000 * 6 / 100 = 3000, endpoint 1
  // costs 2 * 1000 + 0 = 2000: endpoint 1. Plain soft (lambda 32): 1.92 vs 2000: endpoint 0.
  std::vector<LawCandidate> c{{3, 6, 100}, {1, 0, 100}};
  LawParams p{LawMode::kAdaptiveSoft};
  p.prompt_blocks = 3;
  auto r = applyLaw(c, p);
  EXPECT_EQ(r.index, 1);
  EXPECT_DOUBLE_EQ(r.lambda, 50000);
  p.mode = LawMode::kSoft;
  EXPECT_EQ(applyLaw(c, p).index, 0);
  // L = 30: 50000 + 5000 * 14 = 120000, clamped to 100000.
  p.mode = LawMode::kAdaptiveSoft;
  EXPECT_DOUBLE_EQ(applyLaw({{{3, 30, 100}, {1, 0, 100}}}, p).lambda, 100000);
}

TEST(SelectionLaw, UnknownCapacityAndModes) {
  // Unknown capacities count as the mean of the known ones (here none: 1 each).
  auto r = run({{10, 4, 0}, {6, 1, 0}}, {LawMode::kHard});
  // L = 6, caps ceil(1.75 * 6 / 2) = ceil(5.25) = 6 > 4: endpoint 0.
  EXPECT_EQ(r.index, 0);
  EXPECT_EQ(run({}, {LawMode::kHard}).index, -1);
  EXPECT_EQ(parseLawMode("adaptive-soft"), LawMode::kAdaptiveSoft);
  EXPECT_EQ(parseLawMode("Hard"), std::nullopt);
  EXPECT_EQ(parseLawMode(""), std::nullopt);
  EXPECT_EQ(lawModeName(LawMode::kAdaptive), "adaptive");
}

// Peer re-implementations (selection_law.h), each worked by hand.
LawCandidate cand(uint32_t overlap, uint32_t load, uint64_t active = 0, int64_t waiting = -1,
                  double usage = -1) {
  LawCandidate c{overlap, load, 1000};
  c.active_blocks = active;
  c.waiting = waiting;
  c.kv_usage = usage;
  return c;
}

// The same candidate with `pending` blocks of prefill queued there.
LawCandidate pending(LawCandidate c, uint64_t blocks) {
  c.pending_blocks = blocks;
  return c;
}

TEST(SelectionLaw, LmetricIsNewPrefillTimesBatch) {
  LawParams p{LawMode::kLmetric};
  p.prompt_blocks = 10;
  // (10-8+1) x (3+1) = 12; (10-0+1) x (0+1) = 11; (10-5+1) x (0+1) = 6: endpoint 2.
  auto r = run({cand(8, 3), cand(0, 0), cand(5, 0)}, p);
  EXPECT_EQ(r.index, 2);
  EXPECT_TRUE(r.spilled);  // not the overlap argmax (endpoint 0)
  // Nobody holds the prompt: 11 x 3, 11 x 1, 11 x 2: the smallest batch (endpoint 1).
  EXPECT_EQ(run({cand(0, 2), cand(0, 0), cand(0, 1)}, p).index, 1);
  // A full hit still counts load: (0+1) x (9+1) = 10 against (10-8+1) x (0+1) = 3.
  EXPECT_EQ(run({cand(10, 9), cand(8, 0)}, p).index, 1);
  EXPECT_EQ(parseLawMode("lmetric"), LawMode::kLmetric);
  EXPECT_TRUE(isPeerLaw(LawMode::kLmetric));
  EXPECT_FALSE(isPeerLaw(LawMode::kHard));
}

TEST(SelectionLaw, DynamoIsUncachedPrefillPlusDecodeBlocks) {
  LawParams p{LawMode::kDynamo};
  p.prompt_blocks = 10;
  // max(10-8, 0) + 50 = 52; 10 + 5 = 15; 4 + 12 = 16: endpoint 1.
  EXPECT_EQ(run({cand(8, 1, 50), cand(0, 1, 5), cand(6, 1, 12)}, p).index, 1);
  // A full hit on an idle endpoint costs 0.
  EXPECT_EQ(run({cand(10, 0, 0), cand(0, 0, 0)}, p).index, 0);
  EXPECT_EQ(lawModeName(LawMode::kDynamo), "dynamo");
}

// predict-q: predict on a held prompt; a prompt nobody holds to the least queued prefill, ties
// to the endpoint picked least recently, then less load, then the rotating cursor.
TEST(SelectionLaw, PredictQPlacesMissesByQueuedPrefill) {
  LawParams p{LawMode::kPredictQ};
  p.prompt_blocks = 10;
  auto q = pending;
  // Nobody holds it: queued 30, 5, 5 blocks, loads 0, 2, 1, never picked: endpoint 2 (5, then
  // load 1 < 2).
  EXPECT_EQ(run({q(cand(0, 0), 30), q(cand(0, 2), 5), q(cand(0, 1), 5)}, p).index, 2);
  // The same, endpoint 1 picked at t=100, endpoint 2 at t=200: endpoint 1, whose queued prefill
  // began first, though it carries more load.
  auto at = [](LawCandidate c, int64_t t) {
    c.last_pick_ns = t;
    return c;
  };
  EXPECT_EQ(run({q(cand(0, 0), 30), at(q(cand(0, 2), 5), 100), at(q(cand(0, 1), 5), 200)}, p).index,
            1);
  // Four equally queued endpoints picked at 400, 100, 300, 200: endpoint 1, then (once picked
  // at 500) endpoint 3: round-robin's order when the prompts are alike.
  std::vector<LawCandidate> four = {at(q(cand(0, 1), 64), 400), at(q(cand(0, 1), 64), 100),
                                    at(q(cand(0, 1), 64), 300), at(q(cand(0, 1), 64), 200)};
  EXPECT_EQ(run(four, p).index, 1);
  four[1].last_pick_ns = 500;
  EXPECT_EQ(run(four, p).index, 3);
  // Empty queues: the pick order is not read (the request starts at once anywhere); the less
  // loaded takes it: loads 3, 1, 2 picked at 100, 300, 200: endpoint 1.
  EXPECT_EQ(run({at(cand(0, 3), 100), at(cand(0, 1), 300), at(cand(0, 2), 200)}, p).index, 1);
  // All equal: the cursor takes turns.
  p.rotate = 1;
  EXPECT_EQ(run({cand(0, 0), cand(0, 0), cand(0, 0)}, p).index, 1);
  p.rotate = 2;
  EXPECT_EQ(run({cand(0, 0), cand(0, 0), cand(0, 0)}, p).index, 2);
  // A held prompt: predict's cost, whatever the queues: (0 + 1) x 1 against (10 + 1) x 1.
  p.rotate = 0;
  EXPECT_EQ(run({q(cand(10, 0), 500), cand(0, 0)}, p).index, 0);
  EXPECT_EQ(parseLawMode("predict-q"), LawMode::kPredictQ);
  EXPECT_TRUE(placesMisses(LawMode::kPredictQ));
  EXPECT_FALSE(isPeerLaw(LawMode::kPredictQ));
  EXPECT_FALSE(placesMisses(LawMode::kPredict));
}

// Dynamo 1.x: the prefill term adds the prompt work already queued there (active prefill).
TEST(SelectionLaw, DynamoV1AddsQueuedPrefill) {
  LawParams p{LawMode::kDynamoV1};
  p.prompt_blocks = 10;
  auto withPending = pending;
  // pending + uncached + active: 30 + 2 + 5 = 37; 0 + 10 + 5 = 15; 0 + 4 + 12 = 16: endpoint 1,
  // where the old dynamo cost (2 + 5 = 7) keeps endpoint 0, the holder, behind its queue.
  std::vector<LawCandidate> c = {withPending(cand(8, 1, 5), 30), cand(0, 1, 5), cand(6, 1, 12)};
  EXPECT_EQ(run(c, p).index, 1);
  EXPECT_TRUE(run(c, p).spilled);
  EXPECT_EQ(run(c, LawParams{LawMode::kDynamo, 175, 32, 10}).index, 0);
  EXPECT_EQ(parseLawMode("dynamo-v1"), LawMode::kDynamoV1);
  EXPECT_EQ(lawModeName(LawMode::kDynamoV1), "dynamo-v1");
  EXPECT_TRUE(isPeerLaw(LawMode::kDynamoV1));
}

TEST(SelectionLaw, LlmdWeightsQueueKvAndPrefix) {
  LawParams p{LawMode::kLlmd};
  p.prompt_blocks = 8;
  // waiting 4, 0, 2 -> queue (4-w)/4 = 0, 1, 0.5; usage .9, .2, .5 -> kv .1, .8, .5;
  // overlap 8, 0, 4 -> prefix min-max (o-0)/8 = 1, 0, .5. Scores 2q + 2kv + 3p = 3.2, 3.6, 3.5:
  // endpoint 1.
  EXPECT_EQ(run({cand(8, 0, 0, 4, .9), cand(0, 0, 0, 0, .2), cand(4, 0, 0, 2, .5)}, p).index, 1);
  // Engine metrics unknown: queue and kv score 1 everywhere; the prefix decides.
  EXPECT_EQ(run({cand(2, 0), cand(6, 5), cand(0, 0)}, p).index, 1);
  // Min-max, not the matched fraction: of 100 blocks, overlaps 1 and 0, equal queues, usage .9
  // and .1. Min-max prefix 1, 0: 2 + .2 + 3 = 5.2 vs 2 + 1.8 + 0 = 3.8, endpoint 0; the fraction
  // (.01) would give 2 + .2 + .03 = 2.23 vs 3.8, endpoint 1.
  p.prompt_blocks = 100;
  EXPECT_EQ(run({cand(1, 0, 0, 0, .9), cand(0, 0, 0, 0, .1)}, p).index, 0);
  EXPECT_EQ(parseLawMode("llm-d"), LawMode::kLlmd);
}

// llm-d's current default (peers.md: affinity filter at prefix score 0.8, token-load scorer,
// affinity dropped past tau), by hand. Blocks of 16 tokens; tau 1,600 tokens = 100 blocks.
TEST(SelectionLaw, LlmdStickyKeepsAffinityUntilTau) {
  LawParams p{LawMode::kLlmdSticky};
  p.prompt_blocks = 10;
  p.block_tokens = 16;
  p.sticky_tau_tokens = 1600;
  auto pend = [](uint32_t overlap, uint32_t load, uint64_t pending) {
    LawCandidate c = cand(overlap, load);
    c.pending_blocks = pending;
    return c;
  };
  // Scores .9, .8, .5: endpoints 0 and 1 pass the filter. Token loads 30 + 1 = 31, 20 + 2 = 22:
  // endpoint 1, although endpoint 2 has less (0 + 5 = 5): it is not affine.
  auto r = run({pend(9, 0, 30), pend(8, 0, 20), pend(5, 0, 0)}, p);
  EXPECT_EQ(r.index, 1);
  EXPECT_TRUE(r.spilled);  // not the overlap argmax (endpoint 0)
  EXPECT_EQ(r.uncached, 2u);
  // Endpoint 1 over tau (120 + 2 = 122 > 100): endpoint 0 alone passes (31).
  EXPECT_EQ(run({pend(9, 0, 30), pend(8, 0, 120), pend(5, 0, 0)}, p).index, 0);
  // Both affine ones over tau: affinity dropped, least token load over all: endpoint 2 (5).
  EXPECT_EQ(run({pend(9, 0, 130), pend(8, 0, 120), pend(5, 0, 0)}, p).index, 2);
  // A miss (nobody affine): least token load, then least load, then lowest index.
  EXPECT_EQ(run({pend(0, 3, 4), pend(0, 1, 4), pend(0, 0, 9)}, p).index, 1);
  EXPECT_EQ(parseLawMode("llm-d-sticky"), LawMode::kLlmdSticky);
  EXPECT_EQ(lawModeName(LawMode::kLlmdSticky), "llm-d-sticky");
  EXPECT_TRUE(isPeerLaw(LawMode::kLlmdSticky));
}

TEST(SelectionLaw, TaperTightensAsTheWorkersFill) {
  LawParams p{LawMode::kTaper};
  // Four candidates, loads 3, 0, 0, 0: m = (3 + 1) / 4 = 1 -> f = clamp(3.0 + 1.75/14, ...) = 3.0;
  // cap_0 = ceil(3.0 x 4 x 1/4) = 3: endpoint 0 (overlap 5, load 3) is at its cap: a spill (to
  // endpoint 1, overlap 2). Hard's 1.75 would give cap ceil(1.75) = 2: the same spill.
  auto r = run({{5, 3, 1000}, {2, 0, 1000}, {0, 0, 1000}, {0, 0, 1000}}, p);
  EXPECT_DOUBLE_EQ(r.factor, 3.0);
  EXPECT_EQ(r.index, 1);
  // Loads 2, 1, 1, 1: m = 6/4 = 1.5 -> f = 3.0; cap = ceil(3.0 x 6 / 4) = ceil(4.5) = 5 > 2:
  // endpoint 0 keeps it (hard: ceil(1.75 x 1.5) = ceil(2.625) = 3 > 2, keeps it too).
  r = run({{5, 2, 1000}, {2, 1, 1000}, {0, 1, 1000}, {0, 1, 1000}}, p);
  EXPECT_EQ(r.index, 0);
  // Loads 5, 2, 1, 0: m = 9/4 = 2.25 -> f = 3.0 - 1.75 x 0.25 / 14 = 2.96875; cap_0 =
  // ceil(2.96875 x 9 / 4) = ceil(6.68) = 7 > 5: kept, where hard (ceil(1.75 x 2.25) = 4) spills.
  r = run({{5, 5, 1000}, {2, 2, 1000}, {0, 1, 1000}, {0, 0, 1000}}, p);
  EXPECT_NEAR(r.factor, 2.96875, 1e-12);
  EXPECT_EQ(r.index, 0);
  EXPECT_EQ(run({{5, 5, 1000}, {2, 2, 1000}, {0, 1, 1000}, {0, 0, 1000}}, {LawMode::kHard}).index,
            1);
  // Busy: loads 80, 60, 60, 59: m = 260/4 = 65 -> f = 1.25; cap = ceil(1.25 x 65) = ceil(81.25) =
  // 82 > 80: kept. Loads 84, 60, 60, 59: m = 66 -> cap = ceil(82.5) = 83 <= 84: spills to the
  // other affinity member (hard's 1.75 would allow 116 and keep piling on).
  r = run({{5, 80, 1000}, {2, 60, 1000}, {0, 60, 1000}, {0, 59, 1000}}, p);
  EXPECT_DOUBLE_EQ(r.factor, 1.25);
  EXPECT_EQ(r.index, 0);
  EXPECT_EQ(run({{5, 84, 1000}, {2, 60, 1000}, {0, 60, 1000}, {0, 59, 1000}}, p).index, 1);
  EXPECT_EQ(
      run({{5, 84, 1000}, {2, 60, 1000}, {0, 60, 1000}, {0, 59, 1000}}, {LawMode::kHard}).index, 0);
  EXPECT_EQ(parseLawMode("taper"), LawMode::kTaper);
  EXPECT_FALSE(isPeerLaw(LawMode::kTaper));
}

TEST(SelectionLaw, TtftIsQueuedPrefillPlusOwnUncachedPlusLoad) {
  LawParams p{LawMode::kTtft};
  p.ttft_miss_weight = 2;  // (default 8); 2 blocks per in-flight request
  p.prompt_blocks = 100;
  auto c = [](uint32_t overlap, uint32_t load, uint64_t pending) {
    LawCandidate x{overlap, load, 1000};
    x.pending_blocks = pending;
    return x;
  };
  // Home (overlap 90) with 150 blocks queued and load 3: 150 + 2 x 10 + 2 x 3 = 176; a cold idle
  // endpoint: 0 + 2 x 100 + 0 = 200; a cold busy one: 40 + 200 + 2 = 242. Home keeps it.
  auto r = run({c(90, 3, 150), c(0, 0, 0), c(0, 1, 40)}, p);
  EXPECT_EQ(r.index, 0);
  EXPECT_FALSE(r.spilled);
  EXPECT_EQ(r.uncached, 10u);
  // Home's queue at 190: 190 + 20 + 6 = 216 > 200: the idle cold endpoint, a spill; its 100
  // uncached blocks are what the gateway counts as queued there.
  r = run({c(90, 3, 190), c(0, 0, 0), c(0, 1, 40)}, p);
  EXPECT_EQ(r.index, 1);
  EXPECT_TRUE(r.spilled);
  EXPECT_EQ(r.uncached, 100u);
  // A full hit pays no prefill of its own: 30 + 0 + 2 x 5 = 40 against 0 + 2 x 40 + 0 = 80.
  EXPECT_EQ(run({c(100, 5, 30), c(60, 0, 0)}, p).index, 0);
  // Miss weight 1 (LOXILB_KV_TTFT_MISS_WEIGHT_PCT=100): 40 against 0 + 40 = 40: a tie, less
  // load wins (endpoint 1).
  p.ttft_miss_weight = 1.0;
  EXPECT_EQ(run({c(100, 5, 30), c(60, 0, 0)}, p).index, 1);
  EXPECT_EQ(parseLawMode("ttft"), LawMode::kTtft);
  EXPECT_EQ(lawModeName(LawMode::kTtft), "ttft");
  EXPECT_FALSE(isPeerLaw(LawMode::kTtft));  // ours: misses are Tier 1.5's, as under hard
}

TEST(SelectionLaw, PredictIsNewPrefillTimesBatchOverCapacityShare) {
  LawParams p{LawMode::kPredict};
  p.prompt_blocks = 100;
  auto c = [](uint32_t overlap, uint32_t load, double capacity = 1000) {
    return LawCandidate{overlap, load, capacity};
  };
  // A session's home holds 90 of 100 blocks with 9 requests in flight: (10 + 1) x 10 = 110; an
  // idle endpoint holding the shared 20-block preamble: (80 + 1) x 1 = 81: the idle one, a
  // spill.
  auto r = run({c(90, 9), c(20, 0)}, p);
  EXPECT_EQ(r.index, 1);
  EXPECT_TRUE(r.spilled);
  EXPECT_EQ(r.uncached, 80u);
  // Home at 6 in flight: 11 x 7 = 77 < 81: home.
  r = run({c(90, 6), c(20, 0)}, p);
  EXPECT_EQ(r.index, 0);
  EXPECT_FALSE(r.spilled);
  // A full hit still computes the last token: (0 + 1) x 41 = 41 against (60 + 1) x 1 = 61.
  EXPECT_EQ(run({c(100, 40), c(40, 0)}, p).index, 0);
  // Capacity share: 1000 and 3000 blocks, mean 2000. Home (the small engine) at 3 in flight:
  // (10 + 1) x 4 x 2000 / 1000 = 88; the large one at 1: (80 + 1) x 2 x 2000 / 3000 = 108: home.
  // Home at 5: 11 x 6 x 2 = 132 > 108: the large engine.
  EXPECT_EQ(run({c(90, 3, 1000), c(20, 1, 3000)}, p).index, 0);
  EXPECT_EQ(run({c(90, 5, 1000), c(20, 1, 3000)}, p).index, 1);
  // Ties go to more overlap: (1 + 1) x 2 = 4 (overlap 99, load 1) against (3 + 1) x 1 = 4
  // (overlap 97, idle): the holder of more.
  EXPECT_EQ(run({c(97, 0), c(99, 1)}, p).index, 1);
  // Equal cost, overlap and load: the caller's cursor decides (0 -> the first, 1 -> the second,
  // 5 -> 5 mod 3 = the third); it never beats a lower cost.
  EXPECT_EQ(run({c(50, 0), c(50, 0), c(50, 0)}, p).index, 0);
  p.rotate = 1;
  r = run({c(50, 0), c(50, 0), c(50, 0)}, p);
  EXPECT_EQ(r.index, 1);
  EXPECT_FALSE(r.spilled);  // equal holders: no spill
  p.rotate = 5;
  EXPECT_EQ(run({c(50, 0), c(50, 0), c(50, 0)}, p).index, 2);
  EXPECT_EQ(run({c(50, 0), c(50, 1), c(49, 0)}, p).index, 0);
  EXPECT_EQ(parseLawMode("predict"), LawMode::kPredict);
  EXPECT_EQ(lawModeName(LawMode::kPredict), "predict");
  EXPECT_FALSE(isPeerLaw(LawMode::kPredict));  // misses are Tier 1.5's, as under hard
}

// LOXILB_KV_PREDICT_BATCH_OFFSET: the batch factor is (load + offset). A session's home holds 64
// of 224 blocks' worth less than the prompt (uncached 64) with 2 in flight; an idle endpoint
// holds only the shared 64-block preamble (uncached 160). Offset 1: (64 + 1) x 3 = 195 against
// (160 + 1) x 1 = 161, a spill; offset 4: 65 x 6 = 390 against 161 x 4 = 644, home.
TEST(SelectionLaw, PredictBatchOffsetWeighsLoadLess) {
  LawParams p{LawMode::kPredictQ};
  p.prompt_blocks = 224;
  const std::vector<LawCandidate> c = {LawCandidate{160, 2, 1000}, LawCandidate{64, 0, 1000}};
  EXPECT_EQ(run(c, p).index, 1);
  p.predict_batch_offset = 4;
  EXPECT_EQ(run(c, p).index, 0);
  // Under real load the factor still spreads: home at 20 in flight, (64 + 1) x 24 = 1560 against
  // (160 + 1) x 4 = 644.
  EXPECT_EQ(run({LawCandidate{160, 20, 1000}, LawCandidate{64, 0, 1000}}, p).index, 1);
}

// LOXILB_KV_PREDICT_DECODE_WEIGHT_PCT: a started stream weighs w/100 of a batch slot. The home
// above (uncached 64, 2 in flight) against an idle endpoint (uncached 160): both started, w = 25:
// (64 + 1) x (0.25 x 2 + 1) = 97.5 against 161, home; neither started (queued, prefilling or
// non-streaming): (64 + 1) x 3 = 195 against 161, a spill whatever w; one of each: 65 x 2.25 =
// 146.25, home.
TEST(SelectionLaw, PredictDecodeWeightCountsStartedStreamsLess) {
  LawParams p{LawMode::kPredictQ};
  p.prompt_blocks = 224;
  LawCandidate home{160, 2, 1000}, idle{64, 0, 1000};
  home.started = 2;
  EXPECT_EQ(run({home, idle}, p).index, 1);  // w = 100 (the default): today's law
  p.predict_decode_weight_pct = 25;
  EXPECT_EQ(run({home, idle}, p).index, 0);
  home.started = 0;
  EXPECT_EQ(run({home, idle}, p).index, 1);
  home.started = 1;
  EXPECT_EQ(run({home, idle}, p).index, 0);
  // A count over the load is capped at the load: 65 x 1.5 = 97.5, home.
  home.started = 9;
  EXPECT_EQ(run({home, idle}, p).index, 0);
  // Equal holders of a shared 64-block prefix (uncached 160), one with 2 streams decoding, one
  // with 1 in flight not started: 161 x 1.5 against 161 x 2, the first.
  LawCandidate busy{64, 2, 1000}, other{64, 1, 1000};
  busy.started = 2;
  EXPECT_EQ(run({busy, other}, p).index, 0);
}

}  // namespace
}  // namespace kvgate::routing
