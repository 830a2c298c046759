// BPE model: loading tokenizer.json's vocab/merges and the merge loop. See bpe.h.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <queue>
#include <unordered_map>

#include "common/utf8.h"
#include "tokenizer/byte_level.h"

namespace kvgate::tok {
namespace {

// Converts a byte-level vocabulary string to raw bytes (byte_level.h); false if a character is
// outside the table.
bool decodeByteLevel(std::string_view s, std::string& out) {
  out.clear();
  size_t i = 0;
  while (i < s.size()) {
    const int b = byteLevelByte(nextCodePoint(s, i));
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
  }
  return true;
}

std::atomic<uint64_t> g_next_uid{1};

constexpr std::string_view kMeta = "\xE2\x96\x81";  // U+2581, SentencePiece's space
constexpr size_t kMaxCrossing = 64;

struct CacheSlot {
  uint64_t hash = 0;
  std::string key;
  std::vector<uint32_t> ids;
  bool used = false;
};
struct PieceCache {
  static constexpr size_t kSlots = 1 << 16;
  std::vector<CacheSlot> slots{kSlots};
};

// Per thread, the piece caches of the last kMaxCaches models used (least recently used goes):
// data-plane threads tokenize for any model a client names, so one cache per model ever seen
// would grow without bound (each is ~5 MB once full).
PieceCache& cacheFor(uint64_t uid) {
  constexpr size_t kMaxCaches = 4;
  struct Entry {
    uint64_t uid = 0;
    uint64_t used = 0;
    std::unique_ptr<PieceCache> cache;
  };
  thread_local std::vector<Entry> caches;
  thread_local uint64_t clock = 0;
  thread_local uint64_t last_uid = 0;
  thread_local PieceCache* last = nullptr;
  if (uid == last_uid && last) return *last;
  Entry* e = nullptr;
  for (auto& c : caches)
    if (c.uid == uid) e = &c;
  if (!e) {
    if (caches.size() < kMaxCaches) {
      caches.emplace_back();
      e = &caches.back();
    } else {
      e = &*std::min_element(caches.begin(), caches.end(),
                             [](const Entry& a, const Entry& b) { return a.used < b.used; });
    }
    e->uid = uid;
    if (e->cache) {  // reuse the evicted model's slots (no 5 MB allocation per model switch)
      for (auto& slot : e->cache->slots) slot.used = false;
    } else {
      e->cache = std::make_unique<PieceCache>();
    }
  }
  e->used = ++clock;
  last_uid = uid;
  last = e->cache.get();
  return *last;
}

}  // namespace

Result<BpeModel> BpeModel::fromJson(const nlohmann::json& m, bool byte_level) {
  BpeModel b;
  b.uid_ = g_next_uid.fetch_add(1);
  b.byte_level_ = byte_level;
  if (!m.is_object() || m.value("type", std::string("BPE")) != "BPE")
    return fail(400, "model", "only BPE models are supported (model.type)");
  if (!m.contains("vocab") || !m["vocab"].is_object())
    return fail(400, "model", "model.vocab must be an object");
  if (!m.contains("merges") || !m["merges"].is_array())
    return fail(400, "model", "model.merges must be an array");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
      return fail(400, "model", std::string("unsupported non-empty model.") + k);
  }
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    return fail(400, "model", "BPE dropout is not supported (non-deterministic)");
  b.ignore_merges_ = m.value("ignore_merges", false);
  b.byte_fallback_ = m.value("byte_fallback", false);
  b.fuse_unk_ = m.value("fuse_unk", false);

  const auto& vocab = m["vocab"];
  b.vocab_.reserve(vocab.size());
  b.raw_.reserve(vocab.size());
  const auto& byte_to_cp = byteLevelTable().to_cp;
  std::string raw;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_unsigned())
      return fail(400, "model", "vocab id of '" + it.key() + "' is not a non-negative integer");
    if (it.value().get<uint64_t>() >= (1ull << 31))
      return fail(400, "model", "vocab id of '" + it.key() + "' is out of range");
    uint32_t id = it.value().get<uint32_t>();
    b.vocab_.insert(it.key(), id);
    if (!byte_level) {
      b.raw_.insert(it.key(), id);
    } else if (decodeByteLevel(it.key(), raw)) {
      b.raw_.insert(raw, id);
    }
  }
  if (byte_level) {
    std::string one;
    for (uint32_t x = 0; x < 256; ++x) {
      one.clear();
      appendUtf8(one, byte_to_cp[x]);
      uint32_t id = b.vocab_.find(one);
      if (id == FlatStrMap::kNone)
        return fail(400, "model",
                    "byte-level vocabulary lacks the token for byte " + std::to_string(x));
      b.byte_id_[x] = id;
    }
  } else {
    b.ascii_id_.resize(128);
    for (uint32_t c = 0; c < 128; ++c) b.ascii_id_[c] = b.vocab_.find(std::string(1, char(c)));
  }
  if (b.byte_fallback_) {
    b.has_fallback_ = true;  // per character: used when every byte of it has a <0xXX> token
    for (uint32_t x = 0; x < 256; ++x) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", x);
      b.fallback_id_[x] = b.vocab_.find(name);
    }
  }
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    b.unk_ = b.vocab_.find(m["unk_token"].get<std::string>());
    if (b.unk_ == FlatStrMap::kNone)
      return fail(400, "model",
                  "unk_token '" + m["unk_token"].get<std::string>() + "' is not in the vocab");
  }

  const auto& merges = m["merges"];
  b.merges_.reserve(merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& e = merges[rank];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ', 1);
      if (sp == std::string::npos)
        return fail(400, "model", "merge #" + std::to_string(rank) + " is not 'a b': " + s);
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      return fail(400, "model", "merge #" + std::to_string(rank) + " is malformed");
    }
    uint32_t a = b.vocab_.find(left), c = b.vocab_.find(right);
    uint32_t ab = b.vocab_.find(left + right);
    if (a == FlatStrMap::kNone || c == FlatStrMap::kNone || ab == FlatStrMap::kNone)
      return fail(400, "model",
                  "merge #" + std::to_string(rank) +
                      " uses a token missing from the vocab: " + left + " " + right);
    b.merges_.insert(a, c, Merge{static_cast<uint32_t>(rank), ab});
    if (!byte_level && !b.ignore_merges_ && b.crossing_.size() <= kMaxCrossing &&
        right.compare(0, kMeta.size(), kMeta) == 0 &&
        !(left.size() >= kMeta.size() &&
          left.compare(left.size() - kMeta.size(), kMeta.size(), kMeta) == 0))
      b.crossing_.emplace_back(left, right);
  }
  // The textual boundary check assumes a token's string is the text it covers: not true for
  // <0xXX> byte-fallback tokens or unk, so a crossing merge involving them disables the cut.
  bool textual = true;
  std::string unk_text = m.contains("unk_token") && m["unk_token"].is_string()
                             ? m["unk_token"].get<std::string>()
                             : "";
  for (const auto& [l, r] : b.crossing_)
    if (l.find("<0x") != std::string::npos ||
        (!unk_text.empty() && l.find(unk_text) != std::string::npos))
      textual = false;
  b.split_at_meta_ = !byte_level && !b.ignore_merges_ && textual &&
                     b.crossing_.size() <= kMaxCrossing &&
                     b.vocab_.find(kMeta) != FlatStrMap::kNone;
  return b;
}

void BpeModel::initialSymbols(std::string_view piece, std::vector<uint32_t>& syms) const {
  syms.clear();
  if (byte_level_) {
    for (unsigned char c : piece) syms.push_back(byte_id_[c]);
    return;
  }
  bool last_unk = false;
  size_t i = 0;
  while (i < piece.size()) {
    size_t start = i;
    auto b0 = static_cast<unsigned char>(piece[i]);
    uint32_t id;
    if (b0 < 0x80) {
      id = ascii_id_[b0];
      ++i;
    } else {
      nextCodePoint(piece, i);
      id = raw_.find(piece.substr(start, i - start));
    }
    if (id != FlatStrMap::kNone) {
      syms.push_back(id);
      last_unk = false;
      continue;
    }
    bool all_bytes = has_fallback_;
    for (size_t k = start; all_bytes && k < i; ++k)
      all_bytes = fallback_id_[static_cast<unsigned char>(piece[k])] != FlatStrMap::kNone;
    if (all_bytes) {
      for (size_t k = start; k < i; ++k)
        syms.push_back(fallback_id_[static_cast<unsigned char>(piece[k])]);
      last_unk = false;
      continue;
    }
    if (unk_ != UINT32_MAX) {
      if (!(fuse_unk_ && last_unk)) syms.push_back(unk_);
      last_unk = true;
    }
  }
}

void BpeModel::mergeShort(std::vector<uint32_t>& syms) const {
  uint32_t ranks[kShortPiece];
  uint32_t ids[kShortPiece];
  size_t n = syms.size();
  for (size_t k = 0; k + 1 < n; ++k) {
    Merge m = merges_.find(syms[k], syms[k + 1]);
    ranks[k] = m.rank;
    ids[k] = m.id;
  }
  while (n > 1) {
    uint32_t best = UINT32_MAX;
    size_t pos = 0;
    for (size_t k = 0; k + 1 < n; ++k)
      if (ranks[k] < best) {
        best = ranks[k];
        pos = k;
      }
    if (best == UINT32_MAX) break;
    syms[pos] = ids[pos];
    for (size_t k = pos + 1; k + 1 < n; ++k) syms[k] = syms[k + 1];
    for (size_t k = pos + 1; k + 2 < n; ++k) {  // pair k is (k, k+1): n-1 pairs before the merge
      ranks[k] = ranks[k + 1];
      ids[k] = ids[k + 1];
    }
    --n;
    if (pos > 0) {
      Merge m = merges_.find(syms[pos - 1], syms[pos]);
      ranks[pos - 1] = m.rank;
      ids[pos - 1] = m.id;
    }
    if (pos + 1 < n) {
      Merge m = merges_.find(syms[pos], syms[pos + 1]);
      ranks[pos] = m.rank;
      ids[pos] = m.id;
    }
  }
  syms.resize(n);
}

void BpeModel::mergeLong(std::vector<uint32_t>& syms) const {
  size_t n = syms.size();
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t k = 0; k < n; ++k) {
    prev[k] = static_cast<int32_t>(k) - 1;
    next[k] = k + 1 < n ? static_cast<int32_t>(k + 1) : -1;
  }
  struct Cand {
    uint32_t rank;
    uint32_t pos;
    uint32_t left, right;  // the symbol ids the pair had when queued
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t l) {
    if (l < 0 || next[l] < 0) return;
    Merge m = merges_.find(syms[l], syms[next[l]]);
    if (m.rank != UINT32_MAX) heap.push({m.rank, static_cast<uint32_t>(l), syms[l], syms[next[l]]});
  };
  for (size_t k = 0; k + 1 < n; ++k) push(static_cast<int32_t>(k));
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    int32_t l = static_cast<int32_t>(c.pos);
    if (!alive[l] || next[l] < 0) continue;
    int32_t r = next[l];
    if (syms[l] != c.left || syms[r] != c.right) continue;  // stale entry
    syms[l] = merges_.find(c.left, c.right).id;
    alive[r] = false;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    push(prev[l]);
    push(l);
  }
  size_t w = 0;
  for (int32_t k = 0; k >= 0 && static_cast<size_t>(k) < n; k = next[k]) syms[w++] = syms[k];
  syms.resize(w);
}

void BpeModel::encodeUncached(std::string_view piece, std::vector<uint32_t>& out) const {
  if (ignore_merges_) {
    uint32_t id = raw_.find(piece);
    if (id != FlatStrMap::kNone) {
      out.push_back(id);
      return;
    }
  }
  thread_local std::vector<uint32_t> syms;
  initialSymbols(piece, syms);
  if (syms.size() <= kShortPiece)
    mergeShort(syms);
  else
    mergeLong(syms);
  out.insert(out.end(), syms.begin(), syms.end());
}

bool BpeModel::safeBoundary(std::string_view piece, size_t p) const {
  for (const auto& [l, r] : crossing_)
    if (p >= l.size() && piece.compare(p - l.size(), l.size(), l) == 0 &&
        piece.compare(p, r.size(), r) == 0)
      return false;
  return true;
}

void BpeModel::encodePiece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (split_at_meta_ && piece.size() > kMeta.size()) {
    // Cut before each "▁" that follows a non-"▁" character, unless a crossing merge fits there.
    size_t start = 0, p = piece.find(kMeta, 1);
    bool cut = false;
    while (p != std::string_view::npos) {
      bool after_meta =
          p >= kMeta.size() && piece.compare(p - kMeta.size(), kMeta.size(), kMeta) == 0;
      if (!after_meta && p > start && safeBoundary(piece, p)) {
        encodeCached(piece.substr(start, p - start), out);
        start = p;
        cut = true;
      }
      p = piece.find(kMeta, p + 1);
    }
    if (cut) {
      encodeCached(piece.substr(start), out);
      return;
    }
  }
  encodeCached(piece, out);
}

void BpeModel::encodeCached(std::string_view piece, std::vector<uint32_t>& out) const {
  if (piece.size() > kCacheMaxBytes) {
    encodeUncached(piece, out);
    return;
  }
  PieceCache& cache = cacheFor(uid_);
  uint64_t h = XXH3_64bits(piece.data(), piece.size());
  CacheSlot& slot = cache.slots[h & (PieceCache::kSlots - 1)];
  if (slot.used && slot.hash == h && slot.key == piece) {
    out.insert(out.end(), slot.ids.begin(), slot.ids.end());
    return;
  }
  size_t before = out.size();
  encodeUncached(piece, out);
  slot.used = true;
  slot.hash = h;
  slot.key.assign(piece);
  slot.ids.assign(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
}

}  // namespace kvgate::tok
