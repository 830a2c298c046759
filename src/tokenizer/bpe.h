// The BPE model of tokenizer.json ("model": {"type": "BPE"}), with HF semantics:
//   * initial symbols: bytes (byte-level tokenizers, whose vocabulary is stored through GPT-2's
//     bytes_to_unicode map and converted back to raw bytes here) or Unicode characters
//     (SentencePiece-style BPE); a character missing from the vocabulary becomes <0xXX> byte
//     tokens when byte_fallback is set, else unk (consecutive unks fused when fuse_unk);
//   * merges: repeatedly merge the adjacent pair with the lowest rank, leftmost on ties;
//   * ignore_merges: a piece that is itself a vocabulary entry is emitted as one token.
// Pieces up to kShortPiece symbols use an array scan; longer ones a heap over a linked list
// (O(n log n) on 100 KB runs). Results for pieces up to kCacheMaxBytes are memoised in a
// per-thread, per-model direct-mapped cache (no locks).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "tokenizer/flat_maps.h"

namespace kvgate::tok {

class BpeModel {
 public:
  static constexpr size_t kShortPiece = 48;
  static constexpr size_t kCacheMaxBytes = 256;

  // `byte_level`: the vocabulary is in bytes_to_unicode form (a ByteLevel pre-tokenizer is used).
  static Result<BpeModel> fromJson(const nlohmann::json& model, bool byte_level);

  // Appends the ids of one pre-tokenized piece (raw UTF-8 bytes).
  void encodePiece(std::string_view piece, std::vector<uint32_t>& out) const;

  // Id of a vocabulary entry given in tokenizer.json's string form, or FlatStrMap::kNone.
  uint32_t vocabId(std::string_view token) const { return vocab_.find(token); }
  size_t vocabSize() const { return vocab_.size(); }
  BpeModel(BpeModel&&) = default;
  BpeModel& operator=(BpeModel&&) = default;

 private:
  BpeModel() = default;
  void initialSymbols(std::string_view piece, std::vector<uint32_t>& syms) const;
  void mergeShort(std::vector<uint32_t>& syms) const;
  void mergeLong(std::vector<uint32_t>& syms) const;
  void encodeUncached(std::string_view piece, std::vector<uint32_t>& out) const;
  void encodeCached(std::string_view piece, std::vector<uint32_t>& out) const;

  bool byte_level_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  uint32_t unk_ = UINT32_MAX;
  uint64_t uid_ = 0;                // distinguishes models in the per-thread caches
  FlatStrMap vocab_;                // tokenizer.json string form -> id
  FlatStrMap raw_;                  // raw bytes -> id (byte-level: decoded; else same as vocab_)
  uint32_t byte_id_[256] = {};      // byte-level: the id of each single byte
  uint32_t fallback_id_[256] = {};  // byte_fallback: the id of <0xXX>
  bool has_fallback_ = false;
  std::vector<uint32_t> ascii_id_;  // char mode: id of each ASCII character (or kNone)
  PairMap merges_;
  // SentencePiece-style models have no pre-tokenizer, so a whole segment is one BPE word. A merge
  // joins symbols across a position p (where "▁" follows a non-"▁" character) only through a
  // "crossing" merge (left ends with a non-"▁", right starts with "▁"). When a model has few of
  // them, the word is cut at every such p where no crossing merge's strings surround p; the
  // parts merge exactly as the whole would, and each part hits the cache.
  bool split_at_meta_ = false;
  std::vector<std::pair<std::string, std::string>> crossing_;
  bool safeBoundary(std::string_view piece, size_t p) const;
};

}  // namespace kvgate::tok
