// Engine load signals from a worker's Prometheus text (GET /metrics), bytes in, numbers out (no
// I/O). shared/reference/engines.md §7 names them:
//  - vLLM: vllm:cache_config_info{num_gpu_blocks, block_size} (the KV capacity, summed over the
//    data-parallel engines the text covers), vllm:num_requests_running / _waiting (summed),
//    vllm:kv_cache_usage_perc (old name vllm:gpu_cache_usage_perc; 0-1, averaged);
//  - SGLang: sglang:num_running_reqs, sglang:num_queue_reqs (summed), sglang:token_usage
//  (averaged).
// Hostile input is bounded and never throws: lines over kMaxLine bytes, malformed label sets and
// unparsable values are skipped; NaN, infinities and negative values are ignored.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvgate::engines {

struct EngineLoad {
  std::optional<int64_t> num_gpu_blocks;  // KV capacity in blocks
  std::optional<int64_t> block_size;
  std::optional<double> running, waiting;  // requests
  std::optional<double> kv_usage;          // 0-1
};

constexpr size_t kMaxMetricsLine = 64 * 1024;

EngineLoad parseEngineMetrics(std::string_view text);

}  // namespace kvgate::engines
