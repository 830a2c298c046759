// A Split regex that is not one of the hand-written matchers (split_patterns.h), run with
// Oniguruma: the engine HF tokenizers itself uses (Rust onig crate: ONIG_SYNTAX_DEFAULT,
// ONIG_OPTION_NONE). Results equal the reference's except for code points newer than the
// system libonig's Unicode tables (Debian 12: 6.9.8, Unicode 15.0; the reference: 16.0).
// Compiled once at load; searching is thread-safe (each call has its own match region).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace kvgate::tok {

class OnigRegex {
 public:
  static Result<std::shared_ptr<const OnigRegex>> compile(std::string_view pattern);
  ~OnigRegex();
  // Appends the [begin, end) byte ranges of the successive leftmost matches in `s`.
  void matches(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  OnigRegex() = default;
  void* re_ = nullptr;  // regex_t*; oniguruma.h stays inside split_regex.cc
};

}  // namespace kvgate::tok
