// parseEngineMetrics over hand-written Prometheus text in the engines' names (engines.md §7);
// expected values added up by hand.
#include "engines/engine_metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace kvgate::engines {
namespace {

TEST(EngineMetrics, VllmDataParallelEnginesAreSummed) {
  const std::string text =
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n"
      "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 2.0\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5\n"
      "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.25\n"
      "vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\",engine=\"0\","
      "num_gpu_blocks=\"4096\"} 1.0\r\n"
      "vllm:cache_config_info{block_size=\"16\",engine=\"1\",num_gpu_blocks=\"2048\"} 1.0\n"
      "vllm:prompt_tokens_total{engine=\"0\"} 123\n";
  EngineLoad l = parseEngineMetrics(text);
  EXPECT_EQ(l.num_gpu_blocks, 6144);  // 4096 + 2048
  EXPECT_EQ(l.block_size, 16);
  EXPECT_EQ(l.running, 5.0);
  EXPECT_EQ(l.waiting, 1.0);
  EXPECT_DOUBLE_EQ(*l.kv_usage, 0.375);  // (0.5 + 0.25) / 2
}

TEST(EngineMetrics, SglangNamesAndAbsentSignals) {
  EngineLoad l = parseEngineMetrics(
      "sglang:num_running_reqs{model_name=\"m\"} 7\nsglang:num_queue_reqs 2\n"
      "sglang:token_usage{model_name=\"m\"} 0.9\n");
  EXPECT_EQ(l.running, 7.0);
  EXPECT_EQ(l.waiting, 2.0);
  EXPECT_DOUBLE_EQ(*l.kv_usage, 0.9);
  EXPECT_FALSE(l.num_gpu_blocks.has_value());
  EngineLoad none = parseEngineMetrics("");
  EXPECT_FALSE(none.running || none.waiting || none.kv_usage || none.num_gpu_blocks);
}

TEST(EngineMetrics, HostileTextIsSkippedNotTrusted) {
  const std::string huge_line = "vllm:num_requests_running " + std::string(kMaxMetricsLine, '1');
  EngineLoad l = parseEngineMetrics(
      "vllm:num_requests_running{engine=\"0\" 5\n"          // unterminated labels
      "vllm:num_requests_running{a=\"}\"} 4\n"              // a brace inside a quoted value
      "vllm:num_requests_waiting NaN\n"                     // not finite
      "vllm:num_requests_waiting -3\n"                      // negative
      "vllm:num_requests_waiting 1e400\n"                   // out of range
      "vllm:kv_cache_usage_perc 0.5 1700000000000\n"        // a timestamp is allowed
      "vllm:cache_config_info{num_gpu_blocks=\"-5\"} 1\n"   // not a block count
      "vllm:cache_config_info{num_gpu_blocks=\"12x\"} 1\n"  // not a number
      "vllm:cache_config_info{num_gpu_blocks=9} 1\n"        // unquoted
      "{} 1\n" +
      huge_line + "\n");
  EXPECT_EQ(l.running, 4.0);  // only the well-formed line
  EXPECT_FALSE(l.waiting.has_value());
  EXPECT_DOUBLE_EQ(*l.kv_usage, 0.5);
  EXPECT_FALSE(l.num_gpu_blocks.has_value());
  // Sums are capped: many huge block counts cannot overflow.
  std::string many;
  for (int i = 0; i < 20000; ++i)
    many += "vllm:cache_config_info{num_gpu_blocks=\"999999999999999\"} 1\n";
  EXPECT_EQ(parseEngineMetrics(many).num_gpu_blocks, 1'000'000'000'000'000);
}

}  // namespace
}  // namespace kvgate::engines
