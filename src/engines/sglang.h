// SGLang's KV events on the wire (shared/reference/engines.md §3): the same ZMQ framing as vLLM
// (a copy of its publisher), one publisher per attention-DP rank, events as positional arrays
// BlockStored[hashes, parent, token_ids, block_size, lora_id, medium] and BlockRemoved[hashes,
// medium], one event per page. Page hashes (§3.2): H_i = SHA-256(H_{i-1} raw 32 bytes || each
// token as uint32 little-endian), no prefix for the first page; the published value is the first
// 8 digest bytes read big-endian as a signed int64. The gateway's vLLM decoder reads these events
// (signed hashes fold to their 64-bit two's complement); this file computes the hashes (simulator,
// hash contract) and encodes batches (simulator).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engines/vllm_event_encoder.h"

namespace kvgate::engines {

struct SglangPageHash {
  std::string digest;      // 32 bytes
  int64_t event_hash = 0;  // as published
};

// Hashes of the full pages of `tokens`, chained after `parent` (empty: the first page).
std::vector<SglangPageHash> sglangPageHashes(std::string_view parent,
                                             const std::vector<uint32_t>& tokens,
                                             uint32_t page_size);

// [ts, [events...], attn_dp_rank], events positional as SGLang sends them: the same events as
// vLLM's (engines/vllm_event_encoder.h), hashes and parents written as signed int64 (their
// 64-bit two's complement), lora_id nil, no vLLM-only fields.
std::string encodeSglangBatch(double ts, const std::vector<VllmEventOut>& events,
                              int64_t attn_dp_rank);

}  // namespace kvgate::engines
