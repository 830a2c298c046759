// vLLM KV-event batches on the wire, as vLLM (msgspec) encodes them: the simulator publishes
// these. Positional (before vLLM PR #42892: every struct array_like, every field written) or map
// events (after: each event a map tagged "type", fields with a None default omitted when None);
// the envelope is always [ts, events, data_parallel_rank]. Field set of vLLM after #40984
// (engines.md §1.5). The golden batches are reproduced byte for byte.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvgate::engines {

enum class VllmEventEncoding : uint8_t { kPositional, kMap };

struct VllmEventOut {
  enum class Kind : uint8_t { kStored, kRemoved, kCleared } kind = Kind::kStored;
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent;
  std::vector<uint32_t> token_ids;
  uint32_t block_size = 16;
  std::string medium = "GPU";
  std::optional<std::string> lora_name;
  std::optional<int64_t> group_idx = 0;
  std::optional<std::string> spec_kind = "full_attention";
};

std::string encodeVllmBatch(double ts, const std::vector<VllmEventOut>& events, int64_t dp_rank,
                            VllmEventEncoding enc);

}  // namespace kvgate::engines
