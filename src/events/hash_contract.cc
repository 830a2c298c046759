// HashContract: see hash_contract.h.
#include "events/hash_contract.h"

namespace kvgate::events {

HashContract::HashContract(engines::VllmHashAlgo algo, std::string_view seed)
    : algo_(algo), none_hash_(engines::vllmNoneHash(algo, seed)) {}

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
    const std::string* parent = &none_hash_;
    if (e.has_parent) {
      auto it = digests_.find(e.parent);
      parent = it == digests_.end() ? nullptr : &it->second;
    }
    if (mm || !parent || e.block_size == 0 || e.token_ids.size() != n * e.block_size) {
      r.unverifiable += n;
      continue;
    }
    engines::VllmBlockRequest req;
    req.lora_name = e.lora_name;
    // The salt is part of block 0's extra keys only; a later store's chain already carries it.
    if (!e.has_parent) req.cache_salt = e.cache_salt;
    auto hashes = engines::vllmBlockHashes(algo_, *parent, e.token_ids, e.block_size, req);
    for (size_t i = 0; i < n && i < hashes.size(); ++i) {
      if (hashes[i].event_hash != e.block_hashes[i]) {
        r.mismatch += n - i;  // the rest of the chain cannot match either
        break;
      }
      ++r.ok;
      if (digests_.emplace(e.block_hashes[i], hashes[i].digest).second) {
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
