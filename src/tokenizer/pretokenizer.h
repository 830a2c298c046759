// Pre-tokenizers from tokenizer.json ("pre_tokenizer"): split normalized text into pieces that
// the model (BPE) encodes independently. Supported: Split (Regex patterns known to
// split_patterns.h, or a String pattern) with every SplitDelimiterBehavior and `invert`,
// ByteLevel (use_regex GPT-2 split, add_prefix_space; the byte mapping itself is done by the
// model on raw bytes), Metaspace (replacement, prepend_scheme, split), Digits
// (individual_digits), and Sequence of these. Anything else is a load error naming the type.
#pragma once
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "tokenizer/cp_text.h"

namespace kvgate::tok {

// Per-thread working memory reused across calls.
struct PreTokScratch {
  CpText cps;
  std::vector<std::string_view> a, b;
  std::deque<std::string> owned;  // text rewritten by a step (Metaspace, prefix space)
};

class PreTokenizer {
 public:
  // `j` is the tokenizer.json "pre_tokenizer" value (null means: the whole text is one piece).
  static Result<PreTokenizer> fromJson(const nlohmann::json& j);
  // Appends the pieces of `text` (valid UTF-8) to `out`. Pieces point into `text` or scratch.owned.
  // `first` is true for the first segment of the input (Metaspace prepend_scheme "first").
  void split(std::string_view text, bool first, PreTokScratch& scratch,
             std::vector<std::string_view>& out) const;
  struct Step;

 private:
  std::vector<std::shared_ptr<const Step>> steps_;
};

}  // namespace kvgate::tok
