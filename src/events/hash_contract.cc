// HashContract: see hash_contract.h.
#include "events/hash_contract.h"

#include "engines/sglang.h"
#include "engines/trtllm.h"

namespace kvgate::events {

HashContract::HashContract(engines::VllmHashAlgo algo, std::string_view seed)
    : algo_(algo), none_hash_(engines::vllmNoneHash(algo, seed)) {}

HashContract::HashContract(Engine e) : engine_(e) {}

std::unique_ptr<HashContract> HashContract::make(std::string_view algo, std::string_view seed) {
  if (algo == "sha256_sglang") return std::make_unique<HashContract>(Engine::kSglang);
  if (algo == "blockhash_trtllm") return std::make_unique<HashContract>(Engine::kTrtllm);
  if (auto a = engines::parseVllmHashAlgo(algo)) return std::make_unique<HashContract>(*a, seed);
  return nullptr;
}

void HashContract::clear() {
  digests_.clear();
  order_.clear();
}

HashContract::Result HashContract::check(const engines::KvEventBatch& batch) {
  Result r;
  for (const auto& e : batch.events) {
    if (e.kind == engines::KvEvent::Kind::kCleared) {
      clear();
      continue;
    }
    if (e.kind != engines::KvEvent::Kind::kStored) continue;
    const size_t n = e.block_hashes.size();
    bool mm = false;
    for (const auto& x : e.extras) mm = mm || x.content_mix != 0;
    if (engine_ == Engine::kTrtllm) {  // chained on the 64-bit key itself: nothing to remember
      // Multimodal blocks (token_extra_id) hash content the drain does not show; LoRA task ids
      // are not serialised at all (engines.md §5.1), so such blocks read as mismatches.
      if (mm || e.block_size == 0 || e.token_ids.size() != n * e.block_size) {
        r.unverifiable += n;
        continue;
      }
      uint64_t parent = e.has_parent ? e.parent : 0;
      for (size_t i = 0; i < n; ++i) {
        parent =
            engines::trtllmBlockKey(e.token_ids.data() + i * e.block_size, e.block_size, parent);
        if (parent != e.block_hashes[i]) {
          r.mismatch += n - i;
          break;
        }
        ++r.ok;
      }
      continue;
    }
    const std::string* parent = &none_hash_;
    if (e.has_parent) {
      auto it = digests_.find(e.parent);
      parent = it == digests_.end() ? nullptr : &it->second;
    }
    // An adapter known only by its integer id (the decoder names it "#lora_id:N") hashes under a
    // name the events do not carry.
    const bool lora_by_id = e.lora_name.rfind("#lora_id:", 0) == 0;
    if (mm || lora_by_id || !parent || e.block_size == 0 ||
        e.token_ids.size() != n * e.block_size) {
      r.unverifiable += n;
      continue;
    }
    std::vector<std::pair<uint64_t, std::string>> hashes;  // (published value, digest)
    if (engine_ == Engine::kSglang) {
      if (!e.lora_name.empty() || !e.cache_salt.empty()) {  // not part of SGLang's page chain
        r.unverifiable += n;
        continue;
      }
      for (auto& h : engines::sglangPageHashes(*parent, e.token_ids, e.block_size))
        hashes.emplace_back(static_cast<uint64_t>(h.event_hash), std::move(h.digest));
    } else {
      engines::VllmBlockRequest req;
      req.lora_name = e.lora_name;
      // The salt is part of block 0's extra keys only; a later store's chain already carries it.
      if (!e.has_parent) req.cache_salt = e.cache_salt;
      for (auto& h : engines::vllmBlockHashes(algo_, *parent, e.token_ids, e.block_size, req))
        hashes.emplace_back(h.event_hash, std::move(h.digest));
    }
    for (size_t i = 0; i < n && i < hashes.size(); ++i) {
      if (hashes[i].first != e.block_hashes[i]) {
        r.mismatch += n - i;  // the rest of the chain cannot match either
        break;
      }
      ++r.ok;
      if (digests_.emplace(e.block_hashes[i], hashes[i].second).second) {
        order_.push_back(e.block_hashes[i]);
        if (order_.size() > kMaxDigests) {
          digests_.erase(order_.front());
          order_.pop_front();
        }
      }
    }
  }
  return r;
}

}  // namespace kvgate::events
