// HashContract: checks that an engine hashes its KV blocks as the operator declared (issue 10,
// upstream-gateway.md §2.2 "vLLM hash contract"): with LLB_KV_NONE_HASH_SEED set and a rule's
// kvHashAlgo naming a reproducible engine algorithm (sha256_cbor, xxhash_cbor), the gateway
// recomputes the engine's own hash of each stored block (engines/vllm_hash.h; SGLang's
// sha256_sglang with engines/sglang.h, which has no seed: the declaration only turns the check on)
// and compares it with the published one.
//
// A store from block 0 chains from NONE_HASH = H(CBOR(seed)); a later store needs its parent's
// full digest, kept for blocks verified here (at most kMaxDigests, oldest dropped). Blocks that
// cannot be recomputed are "unverifiable": a parent never seen, no token ids, multimodal or
// prompt-embedding extra keys. LoRA names and cache salts are part of the recomputation.
// Routing never depends on this (it keys on content fingerprints); a broken contract is shown in
// metrics and makes Tier 1.5 stop trusting that publisher (the `hash_contract` guard), because
// its events then do not describe what the operator thinks its cache holds.
// One instance per publisher rank, on the event thread.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>

#include "engines/kv_event.h"
#include "engines/vllm_hash.h"

namespace kvgate::events {

class HashContract {
 public:
  static constexpr size_t kMaxDigests = 65536;

  // A checker for kvHashAlgo `algo` ("sha256_cbor", "xxhash_cbor": vLLM with root seed `seed`;
  // "sha256_sglang": SGLang's unseeded page chain, engines/sglang.h; "blockhash_trtllm":
  // TensorRT-LLM's v1 block keys chained on the 64-bit parent key, engines/trtllm.h), or null for
  // algorithms that cannot be reproduced here.
  static std::unique_ptr<HashContract> make(std::string_view algo, std::string_view seed);
  HashContract(engines::VllmHashAlgo algo, std::string_view seed);
  enum class Engine : uint8_t { kVllm, kSglang, kTrtllm };
  explicit HashContract(Engine e);  // SGLang or TensorRT-LLM (no seed)

  struct Result {
    uint64_t ok = 0, mismatch = 0, unverifiable = 0;  // blocks
  };
  // Checks the stores of one batch (before or after it is applied: independent of the index).
  Result check(const engines::KvEventBatch& batch);
  void clear();  // the engine's cache was emptied (AllBlocksCleared, restart)

 private:
  Engine engine_ = Engine::kVllm;
  engines::VllmHashAlgo algo_ = engines::VllmHashAlgo::kSha256Cbor;
  std::string none_hash_;
  std::unordered_map<uint64_t, std::string> digests_;  // event hash -> full digest (verified)
  std::deque<uint64_t> order_;                          // insertion order, for the bound
};

}  // namespace kvgate::events
