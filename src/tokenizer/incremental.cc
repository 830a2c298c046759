// Prefix reuse across turns; see incremental.h for the algorithm and why it is exact.
#include "tokenizer/incremental.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "common/utf8.h"

namespace kvgate::tok {

std::vector<uint32_t> IncrementalEncoder::encode(std::string_view text, bool add_special_tokens) {
  std::string fixed;
  std::string_view t = text;
  if (!repairUtf8(text, &fixed)) t = fixed;
  uint64_t key = XXH3_64bits(t.data(), std::min(t.size(), kKeyBytes));

  // The remembered text with the longest common prefix among those with the same key.
  Entry* best = nullptr;
  size_t best_len = 0;
  for (Entry& e : entries_) {
    if (e.key != key) continue;
    const size_t n = std::min(e.text.size(), t.size());
    size_t l = 0;
    // Whole 256-byte chunks with memcmp (vectorized), then the bytes of the first differing
    // chunk one by one.
    constexpr size_t kChunk = 256;
    while (l + kChunk <= n && std::memcmp(e.text.data() + l, t.data() + l, kChunk) == 0) l += kChunk;
    while (l < n && e.text[l] == t[l]) ++l;
    if (l > best_len) {
      best_len = l;
      best = &e;
    }
  }
  Entry fresh;
  fresh.key = key;
  fresh.text.assign(t);
  size_t start = 0;
  if (best) {
    const size_t need = tok_.maxAddedTokenBytes();
    for (auto it = best->bounds.rbegin(); it != best->bounds.rend(); ++it) {
      if (it->byte + need <= best_len && it->byte <= best_len) {
        start = it->byte;
        fresh.ids.assign(best->ids.begin(), best->ids.begin() + it->ids);
        fresh.bounds.assign(best->bounds.begin(),
                            best->bounds.begin() + (best->bounds.rend() - it));
        break;
      }
    }
  }
  reused_ += start;
  encoded_ += t.size() - start;
  tok_.encodeSegments(t.substr(start), start, fresh.ids, &fresh.bounds);

  std::vector<uint32_t> out;
  if (add_special_tokens) out = tok_.prefixIds();
  out.insert(out.end(), fresh.ids.begin(), fresh.ids.end());
  if (add_special_tokens) out.insert(out.end(), tok_.suffixIds().begin(), tok_.suffixIds().end());

  fresh.stamp = ++clock_;
  if (best && best_len == best->text.size()) {
    *best = std::move(fresh);  // the conversation moved on: replace its previous turn
  } else if (entries_.size() < kEntries) {
    entries_.push_back(std::move(fresh));
  } else {
    auto oldest =
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& a, const Entry& b) { return a.stamp < b.stamp; });
    *oldest = std::move(fresh);
  }
  return out;
}

}  // namespace kvgate::tok
