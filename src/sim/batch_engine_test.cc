// The simulator's step model and scheduler. Expected values are worked by hand from
// shared/reference/benchmarks.md §2 (the formulas and its sanity figures), not from the code.
#include "sim/batch_engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "sim/step_model.h"

namespace kvgate::sim {
namespace {

TEST(StepModel, ReproducesTheReferenceSanityFigures) {
  StepParams p;  // 8B dense, BF16, one H100
  // 8,192 fresh prompt tokens in one step: T = 8192, pairs = 8192^2 / 2 = 33,554,432,
  // t_cmp = 0.027 * 8192 + 8.5e-7 * 33554432 = 221.184 + 28.521 = 249.705 ms;
  // t_mem = 4.8 + 3.9e-5 * 8192 = 5.119 ms; t_ovh = 1.0 + 0.05 = 1.05 ms. Reference: ~249 ms.
  StepShape prefill;
  prefill.addPrefill(8192, 0);
  EXPECT_NEAR(stepMs(p, prefill), 249.705 + 1.05, 0.01);
  EXPECT_NEAR(stepMs(p, prefill), 249, 3);  // the reference's rounded figure

  // 64 decodes over 2,048-token contexts: K = 64 * 2049 = 131,136, t_mem = 4.8 + 5.114 = 9.914;
  // t_cmp = 0.027 * 64 = 1.728; t_ovh = 1.0 + 0.05 * 64 = 4.2. ITL = 14.114 ms (reference ~14).
  StepShape decode;
  for (int i = 0; i < 64; ++i) decode.addDecode(2048);
  EXPECT_NEAR(stepMs(p, decode), 14.114, 0.01);

  // One decode at a short context is Dynamo's ~5.74 ms intercept plus overheads: 4.8 + 3.9e-5*101
  // + 1.05 = 5.854 ms.
  StepShape one;
  one.addDecode(100);
  EXPECT_NEAR(stepMs(p, one), 5.854, 0.001);

  // 70B TP4: 1,000 new tokens on 8,000 cached: pairs = 8e6 + 5e5 = 8.5e6;
  // t_cmp = 0.073 * 1000 + 1.4e-6 * 8.5e6 = 73 + 11.9 = 84.9 ms (reference "~85 ms compute").
  auto big = stepProfile("70b-tp4-h100");
  ASSERT_TRUE(big);
  StepShape cached;
  cached.addPrefill(1000, 8000);
  EXPECT_NEAR(stepMs(*big, cached), 84.9 + 2.0 + 0.05, 0.01);
  EXPECT_FALSE(stepProfile("gpt-5"));

  // Cached prefix tokens are not new tokens but still cost attention pairs.
  StepShape fresh, warm;
  fresh.addPrefill(1024, 0);
  warm.addPrefill(1024, 4096);
  EXPECT_EQ(fresh.new_tokens, warm.new_tokens);
  EXPECT_GT(warm.pairs, fresh.pairs);

  // prefill_factor scales the compute term only.
  StepParams half = p;
  half.prefill_factor = 0.5;
  EXPECT_NEAR(stepMs(half, prefill), 249.705 / 2 + 1.05, 0.01);
  EXPECT_NEAR(stepMs(half, decode), 14.114, 0.01);  // memory-bound: unchanged
}

std::vector<uint32_t> tokens(size_t n, uint32_t base) {
  std::vector<uint32_t> t(n);
  std::iota(t.begin(), t.end(), base);
  return t;
}

std::shared_ptr<Seq> seq(const PrefixCache& c, std::vector<uint32_t> prompt, int64_t max_tokens) {
  auto s = std::make_shared<Seq>();
  s->prompt = std::move(prompt);
  s->keys = c.blockKeys(s->prompt);
  s->max_tokens = max_tokens;
  return s;
}

// Runs steps until idle (bounded), returning how many it took.
int drain(BatchEngine& e, int limit = 10000) {
  int steps = 0;
  while (!e.idle() && steps < limit) {
    StepPlan p = e.plan();
    if (p.empty()) break;
    e.finish(p);
    ++steps;
  }
  return steps;
}

TEST(BatchEngine, ChunkedPrefillThenOneTokenPerStep) {
  PrefixCache cache(16, 1000);
  EngineLimits lim;
  lim.max_batched_tokens = 100;
  BatchEngine e(cache, lim, StepParams{});
  auto s = seq(cache, tokens(250, 1), 3);
  int wakes = 0;
  s->wake = [&] { ++wakes; };
  ASSERT_TRUE(e.submit(s));
  // 250 prompt tokens at 100 per step: chunks 100, 100, 50; the third step yields token 1.
  StepPlan p1 = e.plan();
  ASSERT_EQ(p1.items.size(), 1u);
  EXPECT_EQ(p1.items[0].new_tokens, 100u);
  EXPECT_DOUBLE_EQ(p1.shape.pairs, 100.0 * 100 / 2);
  e.finish(p1);
  StepPlan p2 = e.plan();
  EXPECT_EQ(p2.items[0].new_tokens, 100u);
  EXPECT_DOUBLE_EQ(p2.shape.pairs, 100.0 * 100 + 100.0 * 100 / 2);  // c = 100 computed before
  e.finish(p2);
  EXPECT_EQ(s->generated, 0);
  StepPlan p3 = e.plan();
  EXPECT_EQ(p3.items[0].new_tokens, 50u);
  e.finish(p3);
  EXPECT_EQ(s->generated, 1);
  // Then decodes, one token each, context = tokens in the KV cache.
  StepPlan p4 = e.plan();
  EXPECT_EQ(p4.items[0].new_tokens, 1u);
  EXPECT_DOUBLE_EQ(p4.shape.context_tokens, 251);
  e.finish(p4);
  e.finish(e.plan());
  EXPECT_EQ(s->generated, 3);
  EXPECT_EQ(s->state, Seq::State::kDone);
  EXPECT_EQ(wakes, 3);
  EXPECT_TRUE(e.idle());
  // Its 15 full prompt blocks stay cached and evictable; nothing is referenced or reserved.
  EXPECT_EQ(cache.usedBlocks(), 0u);
  EXPECT_EQ(cache.reservedBlocks(), 0u);
  EXPECT_EQ(cache.cachedBlocks(), 15u);
}

TEST(BatchEngine, CachedPrefixIsNotRecomputedButTheLastTokenIs) {
  PrefixCache cache(16, 1000);
  BatchEngine e(cache, EngineLimits{}, StepParams{});
  auto a = seq(cache, tokens(64, 1), 1);
  ASSERT_TRUE(e.submit(a));
  drain(e);
  // Same 64 tokens again: 4 blocks cached, but vLLM recomputes the last token: hit = 48.
  auto b = seq(cache, tokens(64, 1), 1);
  ASSERT_TRUE(e.submit(b));
  StepPlan p = e.plan();
  EXPECT_EQ(b->cached_tokens, 48u);
  EXPECT_EQ(p.items[0].new_tokens, 16u);
  EXPECT_DOUBLE_EQ(p.shape.pairs, 16.0 * 48 + 16.0 * 16 / 2);
  e.finish(p);
  EXPECT_EQ(b->state, Seq::State::kDone);
  // A prompt sharing 2 of the blocks: hit 32.
  auto t = tokens(32, 1);
  auto tail = tokens(40, 9000);
  t.insert(t.end(), tail.begin(), tail.end());
  auto d = seq(cache, t, 1);
  ASSERT_TRUE(e.submit(d));
  e.plan();
  EXPECT_EQ(d->cached_tokens, 32u);
}

TEST(BatchEngine, BatchLimitsHold) {
  PrefixCache cache(16, 100000);
  EngineLimits lim;
  lim.max_num_seqs = 4;
  lim.max_batched_tokens = 1000;
  BatchEngine e(cache, lim, StepParams{});
  std::vector<std::shared_ptr<Seq>> all;
  for (uint32_t i = 0; i < 10; ++i) {
    all.push_back(seq(cache, tokens(300, i * 1000), 5));
    ASSERT_TRUE(e.submit(all.back()));
  }
  StepPlan p = e.plan();
  // 300 + 300 + 300 + 100 (the fourth's first chunk) = 1,000 tokens, 4 sequences.
  ASSERT_EQ(p.items.size(), 4u);
  EXPECT_DOUBLE_EQ(p.shape.new_tokens, 1000);
  EXPECT_EQ(p.items[3].new_tokens, 100u);
  EXPECT_EQ(e.running(), 4u);
  EXPECT_EQ(e.waiting(), 6u);
  e.finish(p);
  StepPlan q = e.plan();
  // Three decodes and the fourth's remaining 200; no fifth sequence (max_num_seqs).
  ASSERT_EQ(q.items.size(), 4u);
  EXPECT_DOUBLE_EQ(q.shape.new_tokens, 3 + 200);
  drain(e);
  for (const auto& s : all) EXPECT_EQ(s->generated, 5);
}

TEST(BatchEngine, AdmissionWaitsForBlocksAndPreemptionRecomputes) {
  // 10 blocks of 4 tokens. A: 16-token prompt (4 blocks + 1 for its next token = 5).
  PrefixCache cache(4, 10);
  EngineLimits lim;
  BatchEngine e(cache, lim, StepParams{});
  auto a = seq(cache, tokens(16, 100), 12);
  auto b = seq(cache, tokens(16, 200), 12);
  auto c = seq(cache, tokens(16, 300), 2);
  ASSERT_TRUE(e.submit(a));
  ASSERT_TRUE(e.submit(b));
  ASSERT_TRUE(e.submit(c));
  StepPlan p = e.plan();
  // A and B take 5 blocks each; C (5 more) waits.
  EXPECT_EQ(p.items.size(), 2u);
  EXPECT_EQ(e.waiting(), 1u);
  EXPECT_EQ(cache.freeBlocks(), 0u);
  e.finish(p);  // both produce token 1 (KV 16 tokens, 5 blocks held: room up to 20)
  // Decodes up to KV 20 fit; the decode that makes KV 21 needs a sixth block: none is free, so
  // B (the last admitted) is preempted, and A goes on.
  for (int i = 0; i < 4; ++i) e.finish(e.plan());
  EXPECT_EQ(a->generated, 5);
  EXPECT_EQ(b->generated, 5);
  StepPlan q = e.plan();
  EXPECT_EQ(b->state, Seq::State::kWaiting);
  EXPECT_EQ(b->preemptions, 1u);
  EXPECT_EQ(e.preemptions(), 1u);
  ASSERT_EQ(q.items.size(), 1u);
  EXPECT_EQ(q.items[0].seq, a);
  drain(e);
  // Everyone finishes; B recomputed its prompt and 5 generated tokens after A released.
  EXPECT_EQ(a->generated, 12);
  EXPECT_EQ(b->generated, 12);
  EXPECT_EQ(c->generated, 2);
  EXPECT_EQ(cache.usedBlocks(), 0u);
  EXPECT_EQ(cache.reservedBlocks(), 0u);
}

TEST(BatchEngine, RefusesWhatCanNeverFitAndDropsAborted) {
  PrefixCache cache(16, 4);  // 64 tokens in all
  BatchEngine e(cache, EngineLimits{}, StepParams{});
  EXPECT_FALSE(e.submit(seq(cache, tokens(60, 1), 8)));  // 68 tokens > 4 blocks
  auto ok = seq(cache, tokens(40, 1), 8);
  EXPECT_TRUE(e.submit(ok));
  e.finish(e.plan());
  EXPECT_GT(cache.usedBlocks() + cache.reservedBlocks(), 0u);
  ok->aborted = true;
  StepPlan p = e.plan();
  EXPECT_TRUE(p.empty());
  EXPECT_TRUE(e.idle());
  EXPECT_EQ(cache.usedBlocks(), 0u);
  EXPECT_EQ(cache.reservedBlocks(), 0u);
}

TEST(BatchEngine, QueuedWorkCountsForTheOracle) {
  PrefixCache cache(16, 100);
  EngineLimits lim;
  lim.max_num_seqs = 1;
  BatchEngine e(cache, lim, StepParams{});
  ASSERT_TRUE(e.submit(seq(cache, tokens(64, 1), 4)));
  auto t = tokens(48, 500);
  auto tail = tokens(16, 900);
  t.insert(t.end(), tail.begin(), tail.end());
  ASSERT_TRUE(e.submit(seq(cache, t, 4)));  // waits: one sequence per step
  e.plan();
  EXPECT_EQ(e.waiting(), 1u);
  // A prompt sharing the waiting one's first 3 blocks: 3 queued, none cached yet.
  auto probe = tokens(48, 500);
  auto other = tokens(32, 7000);
  probe.insert(probe.end(), other.begin(), other.end());
  EXPECT_EQ(e.queuedLeadingBlocks(cache.blockKeys(probe)), 3u);
  EXPECT_EQ(cache.leadingBlocks(cache.blockKeys(probe)), 0u);
  EXPECT_EQ(e.queuedLeadingBlocks(cache.blockKeys(tokens(64, 1))), 0u);  // running, not queued
}

TEST(BatchEngine, AnAbortBetweenPlanAndFinishFreesEverything) {
  PrefixCache cache(16, 100);
  BatchEngine e(cache, EngineLimits{}, StepParams{});
  auto s = seq(cache, tokens(40, 1), 8);
  int wakes = 0;
  s->wake = [&] { ++wakes; };
  ASSERT_TRUE(e.submit(s));
  StepPlan p = e.plan();  // admitted: 2 prompt blocks referenced, 1 reserved
  EXPECT_EQ(cache.usedBlocks() + cache.reservedBlocks(), 3u);
  s->aborted = true;  // the client left while the step ran
  e.finish(p);
  EXPECT_EQ(s->generated, 0);  // an aborted sequence produces nothing
  EXPECT_EQ(wakes, 0);
  EXPECT_TRUE(e.plan().empty());
  EXPECT_TRUE(e.idle());
  EXPECT_EQ(cache.usedBlocks(), 0u);
  EXPECT_EQ(cache.reservedBlocks(), 0u);
  EXPECT_EQ(cache.cachedBlocks(), 2u);  // its prompt blocks stay cached, evictable
}

TEST(BatchEngine, TrueCacheStateCountsLeadingBlocks) {
  PrefixCache cache(16, 100);
  BatchEngine e(cache, EngineLimits{}, StepParams{});
  ASSERT_TRUE(e.submit(seq(cache, tokens(64, 1), 1)));
  drain(e);
  auto t = tokens(48, 1);
  auto other = tokens(32, 777);
  t.insert(t.end(), other.begin(), other.end());
  EXPECT_EQ(cache.leadingBlocks(cache.blockKeys(t)), 3u);
  EXPECT_EQ(cache.leadingBlocks(cache.blockKeys(tokens(64, 1))), 4u);
  EXPECT_EQ(cache.leadingBlocks(cache.blockKeys(tokens(64, 2))), 0u);
}

}  // namespace
}  // namespace kvgate::sim
