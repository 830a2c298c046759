// vLLM's prefix-cache block hashes, reproduced for the CBOR algorithms (engines.md §2): the
// simulator publishes them as vLLM does, and the gateway recomputes them to check a declared hash
// contract (`kvHashAlgo` with LLB_KV_NONE_HASH_SEED). pickle-based `sha256` is out of scope.
//
// Block i hashes CBOR_canonical([parent_digest, [token ids], extra_keys]) where parent_digest is
// the previous block's digest or NONE_HASH = H(CBOR(seed string)) for block 0; extra_keys is nil
// or an array of: the LoRA name (every block), [mm identifier, offset - block start] per
// multimodal item overlapping the block, the cache salt (block 0 only). Digest: SHA-256
// (sha256_cbor, 32 bytes) or XXH3-128 (xxhash_cbor, 16 bytes, big-endian). The published event
// hash is the digest's last 8 bytes read big-endian.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::engines {

enum class VllmHashAlgo : uint8_t { kSha256Cbor, kXxhashCbor };
std::optional<VllmHashAlgo> parseVllmHashAlgo(std::string_view s);  // "sha256_cbor", "xxhash_cbor"

struct MmItem {
  std::string identifier;
  int64_t offset = 0;  // absolute token offset in the prompt
  int64_t length = 0;  // tokens
};

struct VllmBlockRequest {
  std::string lora_name;
  std::string cache_salt;
  std::vector<MmItem> mm;  // sorted by offset
};

struct VllmBlockHash {
  std::string digest;       // raw bytes (32 or 16)
  std::string payload;      // the CBOR bytes that were hashed (for tests and diagnostics)
  uint64_t event_hash = 0;  // as published in KV events
};

// H(CBOR(seed)): the root parent; `seed` is PYTHONHASHSEED as a string.
std::string vllmNoneHash(VllmHashAlgo algo, std::string_view seed);
std::string vllmDigest(VllmHashAlgo algo, std::string_view bytes);

// Hashes of the full blocks of `tokens` (a partial tail is not hashed), starting after `parent`
// (the NONE_HASH for a prompt's block 0).
std::vector<VllmBlockHash> vllmBlockHashes(VllmHashAlgo algo, std::string_view parent,
                                           const std::vector<uint32_t>& tokens, uint32_t block_size,
                                           const VllmBlockRequest& req);

}  // namespace kvgate::engines
