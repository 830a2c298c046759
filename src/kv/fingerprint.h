// Content fingerprints of KV blocks: the keys of the KV index.
//
// The XXH3-64 seed-1337 chain of shared/golden/xxh3_fingerprint.json, computed from token ids, so
// it works whatever hash algorithm and seed the engines run:
//   content[i] = XXH3_64(seed 1337, block i's token ids as little-endian u32)
//   prefix[0]  = content[0] without a parent, else XXH3_64(seed 1337, LE64(parent) ||
//   LE64(content[0])) prefix[i]  = XXH3_64(seed 1337, LE64(prefix[i-1]) || LE64(content[i]))
// Only full blocks count. Requests that differ in LoRA adapter or cache salt must never share a
// block: their chains start from a partition root (partitionRoot) used as block 0's parent, so
// the default partition (no adapter, no salt) is exactly the golden chain.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kvgate::kv {

constexpr uint64_t kFingerprintSeed = 1337;

uint64_t contentHash(const uint32_t* tokens, size_t n);
uint64_t chainHash(uint64_t parent, uint64_t content);
// A block whose content is more than its tokens (multimodal items, prompt embeddings): the
// content hash mixed with the extra content's hash, so it never equals a text block's.
inline uint64_t mixContent(uint64_t content, uint64_t extra) {
  return extra == 0 ? content : chainHash(content, extra);
}
// The root of a partition's chains; nullopt for the default partition.
std::optional<uint64_t> partitionRoot(std::string_view lora, std::string_view cache_salt);

// Prefix fingerprints of the full blocks of `tokens` (at most `max_out`), chained from `parent`.
// Returns how many were written.
size_t prefixChain(const uint32_t* tokens, size_t n, uint32_t block_size,
                   std::optional<uint64_t> parent, uint64_t* out, size_t max_out);

}  // namespace kvgate::kv
