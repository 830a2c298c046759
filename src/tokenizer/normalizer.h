// Normalizers from tokenizer.json ("normalizer"), applied to each text segment between added
// tokens: NFC/NFD/NFKC/NFKD (ICU, with a quick-check fast path for text already normalized),
// Prepend (only to non-empty segments, as HF does), Replace with a String pattern, and
// Sequence. null or an empty Sequence is the identity. Other types are a load error -- including
// Lowercase: ICU's case mapping (Unicode 15) differs from the reference's (Rust std, newer
// Unicode, U+0130 rule), and no model we serve uses it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvgate::tok {

class Normalizer {
 public:
  static Result<Normalizer> fromJson(const nlohmann::json& j);
  bool identity() const { return steps_.empty(); }
  // Writes the normalized form of `in` (valid UTF-8) to `out`.
  void apply(std::string_view in, std::string& out) const;

  struct Step {
    enum Kind { kNfc, kNfd, kNfkc, kNfkd, kPrepend, kReplace } kind;
    std::string a, b;
  };

 private:
  std::vector<Step> steps_;
};

}  // namespace kvgate::tok
