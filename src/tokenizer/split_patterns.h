// Hand-written matchers for the Split regexes that shipped tokenizers use. Each reproduces
// Oniguruma's leftmost-first backtracking semantics for its one pattern exactly (see the
// comments in split_patterns.cc); patterns are recognised by their exact text.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include "tokenizer/cp_text.h"

namespace kvgate::tok {

// Returns the end (exclusive) of the match starting exactly at i within [i, end), or i when the
// pattern does not match at i. A piece's end is the end of the subject string (lookahead sees it).
using SplitMatcher = size_t (*)(const CpText& t, size_t i, size_t end);

// The matcher for a Split regex, or nullptr when the pattern is not one of the known ones.
SplitMatcher knownSplitMatcher(std::string_view pattern);

// GPT-2's pattern, used by ByteLevel with use_regex=true.
size_t matchGpt2(const CpText& t, size_t i, size_t end);

}  // namespace kvgate::tok
