// Incremental encoding for multi-turn chats: turn N+1's rendered prompt starts with turn N's, so
// only the new suffix needs tokenizing.
//
// Algorithm: remember recent (text, ids, boundaries) results. A boundary is the end of a raw
// added token (e.g. <|im_end|>): HF tokenizes the text after it independently of the text
// before. For a new text T, take the remembered text P sharing the longest prefix (L bytes) with
// T, and the last boundary b of P with b + maxAddedTokenBytes <= L (so every added-token match
// decision up to b reads only bytes T and P share); reuse P's ids up to b and encode T[b:]
// fresh. The result is exactly encode(T). Without a usable boundary, T is encoded in full.
// Knobs: kEntries (remembered texts, default 32), looked up by the hash of the first 256 bytes.
// One cache per thread (not thread-safe); the Tokenizer itself stays shared and lock-free.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace kvgate::tok {

class IncrementalEncoder {
 public:
  static constexpr size_t kEntries = 32;
  static constexpr size_t kKeyBytes = 256;

  explicit IncrementalEncoder(const Tokenizer& tok) : tok_(tok) {}
  std::vector<uint32_t> encode(std::string_view text, bool add_special_tokens);

  // Bytes taken from remembered results vs bytes encoded, over this encoder's life.
  uint64_t reusedBytes() const { return reused_; }
  uint64_t encodedBytes() const { return encoded_; }

 private:
  struct Entry {
    uint64_t key = 0, stamp = 0;
    std::string text;
    std::vector<uint32_t> ids;  // without post-processor ids
    std::vector<Tokenizer::Boundary> bounds;
  };
  const Tokenizer& tok_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0, reused_ = 0, encoded_ = 0;
};

}  // namespace kvgate::tok
