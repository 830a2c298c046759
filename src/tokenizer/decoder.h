// Token ids back to text, as the engines' /detokenize computes it: HF `tokenizers`' decode plus
// transformers' clean-up, from the same tokenizer.json and tokenizer_config.json the encoder reads.
//
// Algorithm (HF tokenizers TokenizerImpl::decode): each id becomes its token string, an added
// token's content (original, not normalized) before a vocabulary entry's string form; ids that
// name neither are dropped; with skip_special_tokens, special added tokens are dropped. The
// list (tokenizer_config.json's added_tokens_decoder marks special tokens too, as transformers
// does at load) then goes through tokenizer.json's "decoder":
//   ByteLevel: every character of a token maps back to its byte through GPT-2's
//     bytes_to_unicode table (a token holding a character outside it contributes its own UTF-8
//     bytes); all bytes are joined and invalid UTF-8 replaced (one U+FFFD per maximal invalid
//     subpart, as Rust's from_utf8_lossy);
//   Sequence of Replace (a literal string), ByteFallback (runs of <0xXX> tokens become their
//     bytes when valid UTF-8, else one U+FFFD per byte), Fuse (join into one), Strip (up to
//     `start` leading and `stop` trailing copies of one character, per token).
// The pieces are joined; then transformers' clean_up_tokenization (tokenizer_config.json's
// clean_up_tokenization_spaces, e.g. true for Llama-3) removes the space before . ? ! , and
// before the contractions 'm 's 've 're n't, and turns " ' " into "'".
// Other decoder types (Metaspace, WordPiece, CTC, ...) are refused at load: decode() is then an
// error naming the type, and callers forward the request to the engine.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvgate::tok {

class Decoder {
 public:
  // From tokenizer.json and tokenizer_config.json (parsed). Never fails: an unsupported
  // decoder is remembered and reported by decode().
  static Decoder fromJson(const nlohmann::json& tokenizer_json, const nlohmann::json& config);

  // The text of `ids`. `clean_up` overrides the config's clean_up_tokenization_spaces.
  Result<std::string> decode(std::span<const uint32_t> ids, bool skip_special_tokens,
                             std::optional<bool> clean_up = std::nullopt) const;
  // The token string of an id (transformers' convert_ids_to_tokens), nullopt when it names none.
  std::optional<std::string_view> token(uint32_t id) const;
  // The number of ids that name a token (vocabulary and added tokens): ids at or above it, and
  // holes below it, name none.
  size_t idSpace() const { return tokens_.size(); }
  // An added token marked normalized under a normalizer: HF tokenizers from 0.23 decode it in
  // its normalized form, older ones as its content, so the text depends on the engine's version.
  bool versionDependent(uint32_t id) const { return id < kind_.size() && version_dep_[id]; }
  // Empty when decode() works; else why not (an unsupported decoder).
  const std::string& unsupported() const { return unsupported_; }
  bool cleanUpByDefault() const { return clean_up_; }

 private:
  struct Step {
    enum Kind : uint8_t { kReplace, kByteFallback, kFuse, kStrip } kind;
    std::string from, to;        // kReplace
    uint32_t strip_cp = 0;       // kStrip: the character
    size_t start = 0, stop = 0;  // kStrip: how many at each end at most
  };
  bool byte_level_ = false;
  bool has_decoder_ = false;  // none: tokens joined with spaces (HF's default)
  std::vector<Step> steps_;   // a Sequence (or one step)
  bool clean_up_ = false;
  std::string unsupported_;
  std::vector<std::string> tokens_;   // by id
  std::vector<uint8_t> kind_;         // by id: 0 none, 1 vocabulary, 2 added, 3 special added
  std::vector<uint8_t> version_dep_;  // by id: versionDependent()
  void load(const nlohmann::json& tj, const nlohmann::json& cfg);
};

// transformers' PreTrainedTokenizerBase.clean_up_tokenization.
std::string cleanUpTokenization(std::string_view s);

}  // namespace kvgate::tok
