// vLLM KV-event batches (the msgpack frame of a ZMQ PUB message or of a replayed batch), decoded
// into KvEventBatch. Pure translation over bytes: no I/O.
//
// Accepted (shared/reference/engines.md §1.5, §0b): the batch envelope as a positional array
// [ts, events, data_parallel_rank?] or as a map; each event as a positional array [tag, fields...]
// (before vLLM PR #42892) or as a map tagged by "type" (after), per event; hashes as unsigned or
// signed integers or as bytes (folded to the last 8 bytes big-endian, as llm-d does); missing
// trailing fields take their defaults, extra trailing fields and unknown map keys are ignored,
// events with an unknown tag are skipped and counted. A value of the wrong type, a truncated
// payload or a length that cannot fit fails the whole batch: nothing of it may be applied.
#pragma once
#include <string>
#include <string_view>

#include "engines/kv_event.h"

namespace kvgate::engines {

// Folds an engine's hash bytes to 64 bits: the last 8 bytes read big-endian (shorter inputs are
// zero-extended on the left).
uint64_t foldHashBytes(std::string_view bytes);

// Decodes `payload` into `out` (cleared first). On failure returns false with `error` naming
// what was wrong; `out` is then unusable.
// A batch declaring more events than this is rejected whole (one engine step publishes a few
// events per scheduled request; 256 sequences per step is vLLM's default).
constexpr uint32_t kMaxBatchEvents = 65536;

bool decodeVllmBatch(std::string_view payload, KvEventBatch& out, std::string& error);

}  // namespace kvgate::engines
