// Fuzz target: the engines' Prometheus text parser (src/engines/engine_metrics.cc), fed what a
// worker's GET /metrics returned. Properties: no crash; deterministic; every value it reports is
// finite and non-negative, and the block capacity is bounded.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engines/engine_metrics.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
bool sane(const std::optional<double>& v) { return !v || (std::isfinite(*v) && *v >= 0); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::engines;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  EngineLoad a = parseEngineMetrics(text), b = parseEngineMetrics(text);
  check(a.num_gpu_blocks == b.num_gpu_blocks && a.running == b.running && a.waiting == b.waiting &&
        a.block_size == b.block_size);
  check(sane(a.running) && sane(a.waiting) && sane(a.kv_usage));
  check(!a.num_gpu_blocks || (*a.num_gpu_blocks >= 0 && *a.num_gpu_blocks <= 1'000'000'000'000'000));
  return 0;
}
