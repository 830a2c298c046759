// KV events of any engine, decoded into one shape (pure data: no I/O, no index).
//
// The engine adapters (vllm_events.cc, later SGLang and TensorRT-LLM) translate their wire
// formats into KvEventBatch; the index (src/kv) applies it. Engine hashes are folded to 64 bits
// the way each engine publishes them (vLLM: last 8 digest bytes big-endian, unsigned).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::engines {

// What a block's extra keys say about its content beyond the token ids (vLLM's extra_keys tuple:
// LoRA name, multimodal items, cache salt on block 0, prompt-embeds hash).
struct BlockExtra {
  // 0: the block's content is its token ids alone (after the partition: LoRA, salt). Otherwise a
  // hash of extra content (multimodal items, prompt embeddings, anything not understood): such a
  // block never matches a text prompt's block.
  uint64_t content_mix = 0;
};

struct KvEvent {
  enum class Kind : uint8_t { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  std::vector<uint64_t> block_hashes;  // engine hashes, folded to 64 bits
  bool has_parent = false;
  uint64_t parent = 0;              // engine hash of the block before the first (has_parent)
  std::vector<uint32_t> token_ids;  // kStored: the blocks' tokens (may be empty: offload tiers)
  uint32_t block_size = 0;          // kStored
  std::string medium;               // "" when absent or nil (the engine's default: GPU)
  std::string lora_name;            // kStored: "" when none
  std::string cache_salt;           // kStored: the salt of block 0's extra keys, "" when none
  std::vector<BlockExtra> extras;   // kStored: one per block when extra_keys was given
  int64_t group_idx = 0;            // KV-cache group (hybrid models); 0 when absent
  std::string spec_kind;            // e.g. "full_attention"; "" when absent
};

struct KvEventBatch {
  double ts = 0;         // publisher wall clock, unix seconds
  int64_t dp_rank = -1;  // data-parallel rank; -1 when absent
  std::vector<KvEvent> events;
  size_t unknown_events = 0;  // events with a tag this decoder does not know (skipped)
  // Empties the batch for the next one (one batch object per subscriber); the event vector's
  // capacity is kept unless an unusually large batch grew it.
  void clear() {
    ts = 0;
    dp_rank = -1;
    events.clear();
    if (events.capacity() > 4096) std::vector<KvEvent>().swap(events);
    unknown_events = 0;
  }
};

}  // namespace kvgate::engines
