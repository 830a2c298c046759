// The fleet benchmark's pieces: percentiles on data worked by hand (NumPy's linear method),
// workload generators (deterministic, the published shapes), arrivals, and the SSE token scanner.
#include <gtest/gtest.h>

#include <set>

#include "bench/fleet/hold_queue.h"
#include "bench/fleet/stats.h"
#include "bench/fleet/stream_client.h"
#include "bench/fleet/workload.h"

namespace kvgate::bench::fleet {
namespace {

TEST(FleetStats, PercentilesInterpolateLinearly) {
  // numpy.percentile([1, 2, 3, 4], q): 50 -> 2.5, 90 -> 3.7, 99 -> 3.97, 0 -> 1, 100 -> 4.
  const std::vector<double> v{4, 1, 3, 2};  // unsorted on purpose
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_NEAR(percentile(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({7}, 90), 7);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(mean(v), 2.5);
}

TEST(FleetStats, BootstrapIntervalOfAPercentile) {
  // Constant data: every resample's p90 is the constant.
  const Interval c = bootstrapPercentile(std::vector<double>(50, 5.0), 90);
  EXPECT_DOUBLE_EQ(c.lo, 5);
  EXPECT_DOUBLE_EQ(c.hi, 5);
  // 180 cached hits at 20 ms and 20 cold prefills at 130 ms: the p90's rank (0.9 x 199 = 179.1)
  // falls between the two modes, so a resample's p90 is 20 when it draws 19 or fewer cold ones
  // (binomial(200, 0.1): about 47 %), 31 when it draws 20 (about 9 %) and 130 when it draws 21 or
  // more (about 44 %): the interval spans both modes although the sample's own p90 is 31.
  std::vector<double> bimodal(180, 20.0);
  bimodal.insert(bimodal.end(), 20, 130.0);
  EXPECT_NEAR(percentile(bimodal, 90), 31.0, 1e-9);
  const Interval b = bootstrapPercentile(bimodal, 90);
  EXPECT_DOUBLE_EQ(b.lo, 20);
  EXPECT_DOUBLE_EQ(b.hi, 130);
  // One mode (1..100): the interval holds the p90 (90.1) and is narrow (its standard error is
  // about 3 here).
  std::vector<double> u;
  for (int i = 1; i <= 100; ++i) u.push_back(i);
  const Interval n = bootstrapPercentile(u, 90);
  EXPECT_LT(n.lo, 90.1);
  EXPECT_GT(n.hi, 90.1);
  EXPECT_LT(n.hi - n.lo, 20);
  // Deterministic for a seed; empty input gives {0, 0}.
  const Interval again = bootstrapPercentile(u, 90);
  EXPECT_EQ(again.lo, n.lo);
  EXPECT_EQ(again.hi, n.hi);
  EXPECT_EQ(bootstrapPercentile({}, 90).hi, 0);
}

TEST(FleetWorkload, GspHasSGLangsDefaultShape) {
  Workload w;
  std::string err;
  ASSERT_TRUE(makeWorkload("gsp", {}, 7, 0, w, err)) << err;
  // 64 groups x 16 prompts of 2,048 + 128 tokens, 256 output tokens.
  ASSERT_EQ(w.prompts.size(), 1024u);
  for (const auto& p : w.prompts) {
    EXPECT_EQ(p.tokens.size(), 2176u);
    EXPECT_EQ(p.output_len, 256);
  }
  // Prompts of a group share exactly the system prompt; groups differ from the first token on.
  const auto& a = w.prompts[0].tokens;
  const auto& b = w.prompts[1].tokens;
  const auto& c = w.prompts[16].tokens;
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 2048, b.begin()));
  EXPECT_FALSE(std::equal(a.begin() + 2048, a.end(), b.begin() + 2048));
  EXPECT_NE(a[0], c[0]);
  EXPECT_EQ(w.prompts[16].group, 1u);
  // (15/16) x (2048/2176) = 0.8823...; 64 x 2048 + 1024 x 128 = 262,144 distinct tokens.
  EXPECT_NEAR(w.ideal_hit, 15.0 / 16.0 * 2048.0 / 2176.0, 1e-12);
  EXPECT_EQ(w.working_set_tokens, 262144u);
  EXPECT_EQ(w.params["system_prompt_len"], 2048);
}

TEST(FleetWorkload, DeterministicInTheSeedAndOverridable) {
  Workload a, b, c;
  std::string err;
  const std::map<std::string, double> small{{"num_groups", 3},
                                            {"prompts_per_group", 2},
                                            {"system_prompt_len", 32},
                                            {"question_len", 8},
                                            {"output_len", 4}};
  ASSERT_TRUE(makeWorkload("llmd", small, 1, 0, a, err)) << err;
  ASSERT_TRUE(makeWorkload("llmd", small, 1, 0, b, err));
  ASSERT_TRUE(makeWorkload("llmd", small, 2, 0, c, err));
  ASSERT_EQ(a.prompts.size(), 6u);
  for (size_t i = 0; i < a.prompts.size(); ++i) EXPECT_EQ(a.prompts[i].tokens, b.prompts[i].tokens);
  EXPECT_NE(a.prompts[0].tokens, c.prompts[0].tokens);
  EXPECT_EQ(a.params["num_groups"], 3);
  EXPECT_EQ(a.working_set_tokens, 3u * 32 + 6u * 8);
  // llm-d's published X-70R defaults when nothing is overridden.
  Workload d;
  ASSERT_TRUE(makeWorkload("llmd", {}, 1, 0, d, err));
  EXPECT_EQ(d.prompts.size(), 750u);
  EXPECT_EQ(d.prompts[0].tokens.size(), 7200u);
  EXPECT_EQ(d.prompts[0].output_len, 1000);
  // Bad input: a clear error, nothing generated.
  Workload e;
  EXPECT_FALSE(makeWorkload("gsp", {{"num_groupz", 3}}, 1, 0, e, err));
  EXPECT_NE(err.find("num_groupz"), std::string::npos);
  EXPECT_FALSE(makeWorkload("gsp", {{"num_groups", 2.5}}, 1, 0, e, err));
  EXPECT_FALSE(makeWorkload("gsp", {{"question_len", 0}, {"system_prompt_len", 0}}, 1, 0, e, err));
  EXPECT_FALSE(makeWorkload("sharegpt", {}, 1, 0, e, err));
}

TEST(FleetWorkload, NoSharingNeverRepeatsAndDrawsStayInRange) {
  Workload w;
  std::string err;
  ASSERT_TRUE(makeWorkload("nosharing", {{"input_len", 64}}, 3, 50, w, err)) << err;
  ASSERT_EQ(w.prompts.size(), 50u);
  EXPECT_EQ(w.draw, Draw::kSequential);
  const auto order = drawOrder(w, 50, 9);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i);
  std::set<std::vector<uint32_t>> distinct;
  for (const auto& p : w.prompts) distinct.insert(p.tokens);
  EXPECT_EQ(distinct.size(), 50u);
  EXPECT_EQ(w.ideal_hit, 0);
  Workload g;
  ASSERT_TRUE(makeWorkload("gsp", {{"num_groups", 2}, {"prompts_per_group", 3}}, 3, 0, g, err));
  const auto draws = drawOrder(g, 1000, 5);
  EXPECT_EQ(draws, drawOrder(g, 1000, 5));
  std::set<size_t> seen(draws.begin(), draws.end());
  EXPECT_EQ(seen.size(), 6u);  // every prompt drawn, none outside the set
  EXPECT_LT(*seen.rbegin(), 6u);
}

TEST(FleetWorkload, PoissonArrivalsHaveTheRequestedRate) {
  const auto at = poissonArrivals(20000, 4.0, 11);
  EXPECT_EQ(at, poissonArrivals(20000, 4.0, 11));
  EXPECT_EQ(at[0], 0);
  for (size_t i = 1; i < at.size(); ++i) EXPECT_GE(at[i], at[i - 1]);
  // Mean gap 250 ms; over 19,999 exponential gaps the sample mean is within 3% (sd of the mean
  // is 250 / sqrt(19999) = 1.8 ms, so 7.5 ms is over four standard deviations).
  EXPECT_NEAR(at.back() / 19999.0, 250.0, 7.5);
}

TEST(FleetWorkload, MultiRoundHistoryGrowsAndRoundsFollowEachOther) {
  Workload w;
  std::string err;
  ASSERT_TRUE(makeWorkload("multiround",
                           {{"users", 2},
                            {"rounds", 3},
                            {"system_prompt_len", 8},
                            {"user_context_len", 16},
                            {"question_len", 4},
                            {"answer_len", 4},
                            {"output_len", 2}},
                           5, 0, w, err))
      << err;
  ASSERT_EQ(w.prompts.size(), 6u);
  // User 0: 8 + 16 + 4 = 28 tokens, then + 4 (answer) + 4 (question) = 36, then 44.
  EXPECT_EQ(w.prompts[0].tokens.size(), 28u);
  EXPECT_EQ(w.prompts[1].tokens.size(), 36u);
  EXPECT_EQ(w.prompts[2].tokens.size(), 44u);
  // Each round's prompt starts with the previous round's; users share only the system prompt.
  EXPECT_TRUE(std::equal(w.prompts[0].tokens.begin(), w.prompts[0].tokens.end(),
                         w.prompts[1].tokens.begin()));
  EXPECT_TRUE(std::equal(w.prompts[0].tokens.begin(), w.prompts[0].tokens.begin() + 8,
                         w.prompts[3].tokens.begin()));
  EXPECT_NE(w.prompts[0].tokens[8], w.prompts[3].tokens[8]);
  // Reused / prompt tokens over the rounds: (8 + 28 + 36) / (28 + 36 + 44) = 72 / 108.
  EXPECT_NEAR(w.ideal_hit, 72.0 / 108.0, 1e-12);
  // Draws: a random user's next round, so each user's rounds come in order.
  const auto order = drawOrder(w, 12, 3);
  std::vector<size_t> seen(2, 0);
  for (size_t idx : order) {
    const size_t u = idx / 3;
    EXPECT_EQ(idx % 3, seen[u] % 3);
    ++seen[u];
  }
}

TEST(FleetWorkload, MooncakeTraceIsParsedAndReplayed) {
  const std::string trace =
      "{\"timestamp\":0,\"input_length\":700,\"output_length\":5,\"hash_ids\":[0,1]}\n"
      "{\"timestamp\":500,\"input_length\":1024,\"output_length\":6,\"hash_ids\":[0,1]}\n"
      "\n"
      "{\"timestamp\":1000,\"input_length\":300,\"output_length\":7,\"hash_ids\":[0]}\n";
  Workload w;
  std::string err;
  ASSERT_TRUE(makeWorkload("mooncake", {}, 1, 0, w, err, trace)) << err;
  ASSERT_EQ(w.prompts.size(), 3u);
  EXPECT_EQ(w.prompts[0].tokens.size(), 700u);
  EXPECT_EQ(w.prompts[1].tokens.size(), 1024u);
  EXPECT_EQ(w.prompts[2].output_len, 7);
  // Equal hash ids, equal tokens: block 0 everywhere, block 1's first 188 tokens in both.
  EXPECT_TRUE(std::equal(w.prompts[2].tokens.begin(), w.prompts[2].tokens.end(),
                         w.prompts[0].tokens.begin()));
  EXPECT_TRUE(std::equal(w.prompts[0].tokens.begin(), w.prompts[0].tokens.end(),
                         w.prompts[1].tokens.begin()));
  EXPECT_EQ(w.draw, Draw::kSequential);
  // Perfect routing, infinite cache: line 2 hits block 0 (512) and the 188 tokens of block 1
  // line 1 computed, line 3 hits 300: 1,000 of 700 + 1024 + 300 tokens.
  EXPECT_NEAR(w.ideal_hit, 1000.0 / 2024.0, 1e-12);
  EXPECT_EQ(w.working_set_tokens, 1024u);
  // The trace's rate is 2 requests/s (two 500 ms gaps); at 4/s time halves; replays cycle with
  // one mean gap between them (period 1,500 ms).
  const auto at = traceArrivals(w, 5, 4.0);
  ASSERT_EQ(at.size(), 5u);
  EXPECT_DOUBLE_EQ(at[1], 250);
  EXPECT_DOUBLE_EQ(at[2], 500);
  EXPECT_DOUBLE_EQ(at[3], 750);
  EXPECT_DOUBLE_EQ(at[4], 1000);
  // Hostile or wrong traces: a clear error naming the line.
  for (const char* bad :
       {"{\"timestamp\":0,\"input_length\":1200,\"output_length\":5,\"hash_ids\":[0,1]}",
        "{\"timestamp\":0,\"input_length\":100,\"output_length\":5,\"hash_ids\":[0,1]}",
        "{\"timestamp\":9,\"input_length\":10,\"output_length\":1,\"hash_ids\":[0]}\n"
        "{\"timestamp\":3,\"input_length\":10,\"output_length\":1,\"hash_ids\":[0]}",
        "{\"timestamp\":0,\"input_length\":10,\"output_length\":1,\"hash_ids\":[-4]}", "not json",
        "[1,2,3]"}) {
    Workload b;
    EXPECT_FALSE(makeWorkload("mooncake", {}, 1, 0, b, err, bad)) << bad;
    EXPECT_NE(err.find("line"), std::string::npos) << err;
  }
}

TEST(FleetWorkload, GeneratedMooncakeTraceRoundTrips) {
  Workload g;
  std::string err;
  ASSERT_TRUE(makeWorkload("mooncake", {{"requests", 50}, {"conversations", 5}}, 9, 0, g, err))
      << err;
  ASSERT_EQ(g.prompts.size(), 50u);
  for (const auto& ids : g.hash_ids) EXPECT_EQ(ids.front(), 0u);  // every request starts so
  for (size_t i = 1; i < g.trace_ms.size(); ++i) EXPECT_GE(g.trace_ms[i], g.trace_ms[i - 1]);
  // Written out and read back: the same prompts.
  Workload r;
  ASSERT_TRUE(makeWorkload("mooncake", {}, 1, 0, r, err, mooncakeTraceJsonl(g))) << err;
  ASSERT_EQ(r.prompts.size(), g.prompts.size());
  for (size_t i = 0; i < r.prompts.size(); ++i) EXPECT_EQ(r.prompts[i].tokens, g.prompts[i].tokens);
  EXPECT_GT(g.ideal_hit, 0.5);  // conversations grow: most blocks are seen before
}

// The agentic workload's shape, checked from its stated rules: a session's turn k is its turn
// k-1 prompt plus that turn's answer and tool output plus a new message; sessions start on one of
// the tool preambles; RAG prompts are a document plus a question; cold prompts share nothing.
TEST(FleetWorkload, AgenticSessionsGrowOverSharedPreamblesWithRagAndCold) {
  Workload w;
  std::string err;
  const std::map<std::string, double> small{{"requests", 400}, {"tools", 2},   {"tool_len", 64},
                                            {"sessions", 3},   {"turns", 5},   {"user_len", 8},
                                            {"tool_out_len", 32}, {"answer_len", 16},
                                            {"docs", 5},       {"doc_len", 48}, {"question_len", 8},
                                            {"cold_len", 40}};
  ASSERT_TRUE(makeWorkload("agentic", small, 3, 0, w, err)) << err;
  ASSERT_EQ(w.prompts.size(), 400u);
  EXPECT_EQ(w.draw, Draw::kSequential);
  std::map<uint32_t, std::vector<const Prompt*>> sessions;
  size_t agent = 0, rag = 0, cold = 0;
  for (const auto& p : w.prompts) {
    if (p.group < 1'000'000) {
      ++agent;
      sessions[p.group].push_back(&p);
      EXPECT_EQ(p.output_len, 200);
    } else if (p.group < 2'000'000) {
      ++rag;
      EXPECT_EQ(p.tokens.size(), 48u + 8u);
      EXPECT_EQ(p.output_len, 128);
    } else {
      ++cold;
      EXPECT_EQ(p.tokens.size(), 40u);
    }
  }
  // 60 / 30 / 10 % of 400, within wide bounds of the seeded draw.
  EXPECT_GT(agent, 200u);
  EXPECT_GT(rag, 80u);
  EXPECT_GT(cold, 15u);
  size_t full = 0;
  for (const auto& [id, turns] : sessions) {
    ASSERT_LE(turns.size(), 5u);
    full += turns.size() == 5;
    // Turn 1: a preamble (64) + a message (8); each later turn adds 16 + 32 + 8 tokens and
    // starts with the whole previous prompt.
    EXPECT_EQ(turns[0]->tokens.size(), 64u + 8u);
    for (size_t k = 1; k < turns.size(); ++k) {
      ASSERT_EQ(turns[k]->tokens.size(), turns[k - 1]->tokens.size() + 16 + 32 + 8);
      EXPECT_TRUE(std::equal(turns[k - 1]->tokens.begin(), turns[k - 1]->tokens.end(),
                             turns[k]->tokens.begin()));
    }
  }
  EXPECT_GT(full, 10u);  // sessions run their 5 turns, then restart
  // Sessions share one of the 2 preambles: at most 2 distinct first 64 tokens.
  std::set<std::vector<uint32_t>> pre;
  for (const auto& [id, turns] : sessions)
    pre.insert(std::vector<uint32_t>(turns[0]->tokens.begin(), turns[0]->tokens.begin() + 64));
  EXPECT_LE(pre.size(), 2u);
  EXPECT_GT(w.ideal_hit, 0.5);  // most agent tokens and popular documents repeat
  EXPECT_LT(w.ideal_hit, 1.0);
  // Deterministic in the seed; invalid mixes refused.
  Workload again;
  ASSERT_TRUE(makeWorkload("agentic", small, 3, 0, again, err));
  EXPECT_EQ(again.prompts[123].tokens, w.prompts[123].tokens);
  auto bad = small;
  bad["agent_pct"] = 80;
  bad["rag_pct"] = 30;
  EXPECT_FALSE(makeWorkload("agentic", bad, 3, 0, again, err));
}

TEST(FleetClient, SseTokenEventsAreCountedAcrossReads) {
  SseTokenScanner s;
  int tokens = 0;
  auto on = [&] { ++tokens; };
  // A chat role chunk (not a token), two token chunks split across reads, the usage chunk, DONE.
  ASSERT_TRUE(
      s.feed("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
             "\"content\":\"\"}}]}\n\n",
             on));
  EXPECT_EQ(tokens, 0);
  ASSERT_TRUE(s.feed("data: {\"choices\":[{\"index\":0,\"text\":\"the\"}]}\n\ndata: {\"cho", on));
  EXPECT_EQ(tokens, 1);
  ASSERT_TRUE(s.feed("ices\":[{\"index\":0,\"delta\":{\"content\":\" cache\"}}]}\n\n", on));
  EXPECT_EQ(tokens, 2);
  ASSERT_TRUE(
      s.feed("data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", on));
  EXPECT_EQ(tokens, 2);
}

}  // namespace
}  // namespace kvgate::bench::fleet

namespace kvgate::bench::fleet {
namespace {

// A prompt of `blocks` 16-token blocks: the first `shared` blocks from family `f`, the rest
// unique to `u`.
std::vector<uint32_t> holdPrompt(uint32_t f, uint32_t u, size_t shared, size_t blocks) {
  std::vector<uint32_t> t;
  for (size_t i = 0; i < blocks * 16; ++i)
    t.push_back(i < shared * 16 ? f * 100000 + static_cast<uint32_t>(i)
                                : u * 100000 + 50000 + static_cast<uint32_t>(i));
  return t;
}

TEST(FleetHoldQueue, BindsToHolderWhenItHasRoomElseWaitsThenSpills) {
  using C = HoldQueue::Clock;
  const C::time_point t0{};
  // Two workers; room while the queued prefill is under 64 tokens (4 blocks).
  HoldQueue q(2, 16, HoldQueue::Order::kArrival, 64, std::chrono::milliseconds(200));
  int bound_calls = 0;
  auto item = [&](uint32_t f, uint32_t u, size_t shared, size_t blocks) {
    HoldQueue::Item it;
    it.chain = OracleMemory::chain(holdPrompt(f, u, shared, blocks), 16);
    it.on_bound = [&bound_calls] { ++bound_calls; };
    return it;
  };
  // A: 3 blocks nobody holds -> the least queued worker (0, the first of two empty ones).
  HoldQueue::Item a = item(1, 1, 2, 3);
  q.add(a, t0);
  ASSERT_EQ(a.worker, 0u);
  EXPECT_EQ(a.uncached, 3u);
  EXPECT_EQ(q.queued(0), 3u);
  // B shares A's 2 leading blocks (+1 own): held by worker 0, which has room (3 x 16 = 48 < 64):
  // bound there, prefilling 1 block. Worker 0 queues 4 blocks = 64 tokens: full now.
  HoldQueue::Item b = item(1, 2, 2, 3);
  q.add(b, t0);
  ASSERT_EQ(b.worker, 0u);
  EXPECT_EQ(b.uncached, 1u);
  EXPECT_EQ(q.queued(0), 4u);
  // C shares them too, but worker 0 has no room: it waits (worker 1 holds nothing of it).
  HoldQueue::Item c = item(1, 3, 2, 3);
  q.add(c, t0);
  EXPECT_EQ(c.worker, SIZE_MAX);
  EXPECT_EQ(q.waiting(), 1u);
  // D: nobody holds it -> worker 1 at once (skipping C, which must wait).
  HoldQueue::Item d = item(9, 9, 0, 2);
  q.add(d, t0 + std::chrono::milliseconds(10));
  EXPECT_EQ(d.worker, 1u);
  EXPECT_EQ(c.worker, SIZE_MAX);
  // 199 ms later C still waits for its holder; at 200 ms it spills to worker 1 (room: 2 blocks
  // queued), prefilling all 3 blocks.
  q.pump(t0 + std::chrono::milliseconds(199));
  EXPECT_EQ(c.worker, SIZE_MAX);
  q.pump(t0 + std::chrono::milliseconds(200));
  ASSERT_EQ(c.worker, 1u);
  EXPECT_EQ(c.uncached, 3u);
  EXPECT_EQ(q.queued(1), 5u);
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(bound_calls, 4);
  EXPECT_EQ(q.counts().spills, 1u);
  EXPECT_EQ(q.counts().cold, 2u);  // A and D
  EXPECT_EQ(q.counts().waited, 1u);
  // A starts (first byte): worker 0 queues 1 block again.
  q.started(0, a.uncached, t0 + std::chrono::milliseconds(300));
  EXPECT_EQ(q.queued(0), 1u);
}

TEST(FleetHoldQueue, FewestUncachedFirstServesTheShortPrefillBeforeTheLongOne) {
  using C = HoldQueue::Clock;
  const C::time_point t0{};
  // One worker, room under 32 tokens (2 blocks).
  HoldQueue q(1, 16, HoldQueue::Order::kFewestUncached, 32, std::chrono::hours(1));
  HoldQueue::Item first, big, small;
  first.chain = OracleMemory::chain(holdPrompt(1, 1, 3, 3), 16);
  q.add(first, t0);  // 3 uncached blocks: bound (0 < 32), the worker is full
  ASSERT_EQ(first.worker, 0u);
  big.chain = OracleMemory::chain(holdPrompt(2, 2, 0, 5), 16);  // 5 blocks nobody holds
  q.add(big, t0 + std::chrono::milliseconds(1));
  small.chain = OracleMemory::chain(holdPrompt(1, 3, 3, 4), 16);  // 1 block beyond `first`'s 3
  q.add(small, t0 + std::chrono::milliseconds(2));
  EXPECT_EQ(q.waiting(), 2u);
  // `first` starts: room for one more; the small one (1 uncached block) goes before the big one
  // (5), though it came later.
  q.started(0, first.uncached, t0 + std::chrono::milliseconds(3));
  EXPECT_EQ(small.worker, 0u);
  EXPECT_EQ(small.uncached, 1u);
  EXPECT_EQ(big.worker, 0u);  // 1 block queued (16 < 32): room for the big one as well
  EXPECT_EQ(q.queued(0), 6u);
  // In arrival order the big one would have been bound first: same fleet, kArrival.
  HoldQueue a(1, 16, HoldQueue::Order::kArrival, 32, std::chrono::hours(1));
  HoldQueue::Item f2, big2, small2;
  f2.chain = first.chain;
  big2.chain = big.chain;
  small2.chain = small.chain;
  std::vector<int> order;
  big2.on_bound = [&order] { order.push_back(2); };
  small2.on_bound = [&order] { order.push_back(1); };
  a.add(f2, t0);
  a.add(big2, t0);
  a.add(small2, t0);
  a.started(0, f2.uncached, t0);
  EXPECT_EQ(order, (std::vector<int>{2}));  // the big one (5 blocks = 80 tokens) fills it
  EXPECT_EQ(small2.worker, SIZE_MAX);
}

}  // namespace
}  // namespace kvgate::bench::fleet
