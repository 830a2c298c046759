// Fuzz target: the vLLM KV-event decoder (src/engines/vllm_events.cc) and the KV index fed with
// what it decodes (src/kv/kv_index.cc): hostile msgpack from a worker's event stream.
// Properties: no crash, no unbounded allocation (lengths are checked against the bytes left); a
// payload that fails to decode changes nothing in the index (nothing is applied); decoding is
// deterministic; after applying a decoded batch the index's block count matches what scoring
// sees for a chain built from the first stored event.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engines/vllm_events.h"
#include "kv/fingerprint.h"
#include "kv/kv_index.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate;
  std::string_view payload(reinterpret_cast<const char*>(data), size);
  engines::KvEventBatch b1, b2;
  std::string e1, e2;
  const bool ok1 = engines::decodeVllmBatch(payload, b1, e1);
  const bool ok2 = engines::decodeVllmBatch(payload, b2, e2);
  check(ok1 == ok2 && e1 == e2);
  check(ok1 || !e1.empty());
  if (!ok1) return 0;  // a failed batch is never applied: the index is untouched by design
  check(b1.events.size() == b2.events.size());
  kv::KvIndex idx(/*max_blocks_per_worker=*/4096);
  int w = idx.addWorker();
  kv::ApplyStats st;
  idx.apply(w, b1, st);
  check(idx.blocks(w) <= 4096);
  check(st.stored_blocks >= idx.blocks(w) || st.clears > 0);
  // Score the chain of the first stored event that starts at a root: never more than it holds.
  for (const auto& e : b1.events) {
    if (e.kind != engines::KvEvent::Kind::kStored || e.has_parent || e.block_size == 0) continue;
    uint64_t chain[64];
    size_t n = kv::prefixChain(e.token_ids.data(), e.token_ids.size(), e.block_size,
                               kv::partitionRoot(e.lora_name, e.cache_salt), chain, 64);
    std::array<uint32_t, kv::kMaxWorkers> ov{};
    size_t best = idx.score(chain, n, uint64_t{1} << w, ov);
    check(best <= n && ov[static_cast<size_t>(w)] == best);
    break;
  }
  idx.removeWorker(w);
  check(idx.blocks(w) == 0);
  return 0;
}
