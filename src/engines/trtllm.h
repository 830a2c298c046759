// TensorRT-LLM's KV events as the HTTP drain serves them, and its v1 block keys
// (shared/reference/engines.md §5.1-5.2). Bytes in, data out: no I/O.
//
// POST /kv_cache_events answers a JSON array of the events queued since the last call (and drops
// them): {"event_id", "data": {"type": "stored" | "removed" | "created" | "updated", ...},
// "window_size", "attention_dp_rank"?}. stored: {"parent_hash": u64|null, "blocks": [{"block_hash":
// u64, "tokens": [{"token_id", "token_extra_id"}], "cache_level", "priority"}]}; removed:
// {"block_hashes": [u64]}; created/updated carry nothing the index needs (skipped, counted).
// 64-bit values are read as exact integers, never through a double; a value out of range, a
// negative id or a wrong type rejects the whole answer (nothing of it is applied).
// Block key v1: seed = n_tokens XOR (parent * 0xBF58476D1CE4E5B9), then per token v: 32-bit
// avalanche ((v >> 16) ^ v) * 0x45D9F3B twice, v ^= v >> 16, v += 0x9E3779B9 (mod 2^32), and
// seed ^= v + (seed << 6) + (seed >> 2) (mod 2^64); parent 0 at the root.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engines/kv_event.h"

namespace kvgate::engines {

uint64_t trtllmBlockKey(const uint32_t* tokens, size_t n, uint64_t parent);

struct TrtllmEvent {
  uint64_t event_id = 0;
  int64_t rank = 0;       // attention_dp_rank (0 when absent)
  bool relevant = false;  // stored or removed (else skipped)
  KvEvent event;
};

constexpr size_t kMaxTrtllmAnswer = 16
                                    << 20;  // a drain answer (its JSON DOM is several times this)

// Parses one drain answer; false (with `err`) when it is not the documented shape.
bool decodeTrtllmEvents(std::string_view json, std::vector<TrtllmEvent>& out, std::string& err);

// The JSON of one stored event (simulator): `blocks` keys with their tokens, chained after
// `parent` (0 = none).
std::string trtllmStoredJson(uint64_t event_id, uint64_t parent, const std::vector<uint64_t>& keys,
                             const std::vector<uint32_t>& tokens, uint32_t tokens_per_block);
std::string trtllmRemovedJson(uint64_t event_id, const std::vector<uint64_t>& keys);

}  // namespace kvgate::engines
