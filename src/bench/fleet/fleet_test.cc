// The fleet benchmark's pieces: percentiles on data worked by hand (NumPy's linear method),
// workload generators (deterministic, the published shapes), arrivals, and the SSE token scanner.
#include <gtest/gtest.h>

#include <set>

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
  EXPECT_FALSE(w.with_replacement);
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
