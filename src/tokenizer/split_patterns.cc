// Hand-written Split matchers (tokenizer.json pre_tokenizer Split with a Regex pattern).
//
// Algorithm: each function tries the pattern's alternatives in order at position i, the way a
// backtracking engine (Oniguruma, which HF tokenizers uses) does, and returns the first successful
// match's end. Greedy quantifiers that must give characters back are resolved in closed form:
//   \s*[\r\n]+   -> ends just after the last CR/LF inside the whitespace run starting at i;
//   \s+(?!\S)    -> the whitespace run, minus its last character unless the run ends the subject;
//   X?Y+         -> tried with X first, then without, as the engine does.
// Known patterns: Llama-3 (\p{N}{1,3}), Qwen2/2.5/3 (\p{N}), gpt-oss/o200k (case classes),
// DeepSeek-V3's three chained Splits, and GPT-2's (ByteLevel use_regex=true). Anything else is
// reported at load time by the caller.
#include "tokenizer/split_patterns.h"

#include <string>

namespace kvgate::tok {
namespace {

inline bool isCrLf(uint32_t c) { return c == '\r' || c == '\n'; }
inline bool has(const CpText& t, size_t i, uint16_t m) { return (t.fl[i] & m) != 0; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at i; returns the length matched (0 if none).
size_t contraction(const CpText& t, size_t i, size_t end) {
  if (i + 1 >= end || t.cp[i] != '\'') return 0;
  auto lower = [](uint32_t c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if (c == 0x17F) return 's';  // LATIN SMALL LETTER LONG S case-folds to 's'
    return c;
  };
  uint32_t a = lower(t.cp[i + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= end) return 0;
  uint32_t b = lower(t.cp[i + 2]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

size_t runOf(const CpText& t, size_t i, size_t end, uint16_t mask) {
  while (i < end && has(t, i, mask)) ++i;
  return i;
}

// The three whitespace alternatives shared by all the patterns: \s*[\r\n]+ | \s+(?!\S) | \s+
size_t whitespaceTail(const CpText& t, size_t i, size_t end) {
  if (!has(t, i, kWS)) return i;
  size_t j = runOf(t, i, end, kWS);
  for (size_t k = j; k > i; --k)
    if (isCrLf(t.cp[k - 1])) return k;
  if (j == end) return j;
  if (j - i >= 2) return j - 1;
  return j;
}

// ` ?[^\s\p{L}\p{N}]+` followed by [\r\n]* (or [\r\n/]* for o200k when slash is true).
size_t punctRun(const CpText& t, size_t i, size_t end, bool slash) {
  const uint16_t notOther = kWS | kL | kN;
  size_t s = i;
  if (t.cp[s] == ' ' && s + 1 < end && !has(t, s + 1, notOther)) ++s;
  if (has(t, s, notOther)) return i;
  size_t j = s;
  while (j < end && !has(t, j, notOther)) ++j;
  while (j < end && (isCrLf(t.cp[j]) || (slash && t.cp[j] == '/'))) ++j;
  return j;
}

inline bool prefixChar(const CpText& t, size_t i) {
  return !isCrLf(t.cp[i]) && !has(t, i, kL | kN);
}

// Llama-3 and Qwen2: (?i:contractions)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}|
//                    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <size_t maxDigits>
size_t matchLlama3Family(const CpText& t, size_t i, size_t end) {
  if (size_t n = contraction(t, i, end)) return i + n;
  if (prefixChar(t, i) && i + 1 < end && has(t, i + 1, kL)) return runOf(t, i + 1, end, kL);
  if (has(t, i, kL)) return runOf(t, i, end, kL);
  if (has(t, i, kN)) {
    size_t j = i;
    while (j < end && j - i < maxDigits && has(t, j, kN)) ++j;
    return j;
  }
  size_t p = punctRun(t, i, end, false);
  if (p > i) return p;
  return whitespaceTail(t, i, end);
}

// o200k (gpt-oss):
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:contr)?
//  |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:contr)?
//  |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
constexpr uint16_t kUpper = kLu | kLt | kLm | kLo | kM;
constexpr uint16_t kLower = kLl | kLm | kLo | kM;

// U*L+ from s: the greedy U* gives back until a lower-class character can start L+.
size_t upperStarLowerPlus(const CpText& t, size_t s, size_t end) {
  size_t u = runOf(t, s, end, kUpper);
  for (size_t p = u + 1; p-- > s;) {
    if (p < end && has(t, p, kLower)) return runOf(t, p, end, kLower);
  }
  return s;
}

size_t matchO200k(const CpText& t, size_t i, size_t end) {
  bool pre = prefixChar(t, i) && i + 1 < end;
  // Alternative 1, with then without the optional prefix character.
  for (size_t s : {pre ? i + 1 : i, i}) {
    size_t e = upperStarLowerPlus(t, s, end);
    if (e > s) return e + contraction(t, e, end);
    if (!pre) break;
  }
  // Alternative 2.
  for (size_t s : {pre ? i + 1 : i, i}) {
    size_t u = runOf(t, s, end, kUpper);
    if (u > s) {
      size_t e = runOf(t, u, end, kLower);
      return e + contraction(t, e, end);
    }
    if (!pre) break;
  }
  if (has(t, i, kN)) {
    size_t j = i;
    while (j < end && j - i < 3 && has(t, j, kN)) ++j;
    return j;
  }
  size_t p = punctRun(t, i, end, true);
  if (p > i) return p;
  return whitespaceTail(t, i, end);
}

// DeepSeek-V3 split 1: \p{N}{1,3}
size_t matchDigits3(const CpText& t, size_t i, size_t end) {
  size_t j = i;
  while (j < end && j - i < 3 && has(t, j, kN)) ++j;
  return j;
}

// DeepSeek-V3 split 2: [一-龥぀-ゟ゠-ヿ]+  (U+4E00..U+9FA5, U+3040..U+309F, U+30A0..U+30FF)
inline bool deepseekCjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF);
}
size_t matchDeepseekCjk(const CpText& t, size_t i, size_t end) {
  size_t j = i;
  while (j < end && deepseekCjk(t.cp[j])) ++j;
  return j;
}

// DeepSeek-V3 split 3:
//   [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ |
//    ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
inline bool asciiPunct(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}
inline bool asciiLetter(uint32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

size_t matchDeepseekMain(const CpText& t, size_t i, size_t end) {
  if (asciiPunct(t.cp[i]) && i + 1 < end && asciiLetter(t.cp[i + 1])) {
    size_t j = i + 1;
    while (j < end && asciiLetter(t.cp[j])) ++j;
    return j;
  }
  bool pre = !isCrLf(t.cp[i]) && !has(t, i, kL | kP | kS);
  if (pre && i + 1 < end && has(t, i + 1, kL | kM)) return runOf(t, i + 1, end, kL | kM);
  if (has(t, i, kL | kM)) return runOf(t, i, end, kL | kM);
  size_t s = i;
  if (t.cp[s] == ' ' && s + 1 < end && has(t, s + 1, kP | kS)) ++s;
  if (has(t, s, kP | kS)) {
    size_t j = runOf(t, s, end, kP | kS);
    while (j < end && isCrLf(t.cp[j])) ++j;
    return j;
  }
  return whitespaceTail(t, i, end);
}

// Patterns as they appear in tokenizer.json after JSON decoding, with literal CR/LF characters
// written as \r and \n (see canonical()).
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kDigits3 = R"(\p{N}{1,3})";
constexpr std::string_view kDeepseekCjk = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+";
constexpr std::string_view kDeepseekMain =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string canonical(std::string_view p) {
  std::string out;
  for (char c : p) {
    if (c == '\r')
      out += "\\r";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

}  // namespace

size_t matchGpt2(const CpText& t, size_t i, size_t end) {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+  (case-sensitive)
  if (i + 1 < end && t.cp[i] == '\'') {
    uint32_t a = t.cp[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < end) {
      uint32_t b = t.cp[i + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    }
  }
  size_t s = (t.cp[i] == ' ' && i + 1 < end) ? i + 1 : i;
  for (uint16_t cls : {kL, kN}) {
    if (has(t, s, cls)) return runOf(t, s, end, cls);
    if (s != i && has(t, i, cls)) return runOf(t, i, end, cls);
  }
  const uint16_t notOther = kWS | kL | kN;
  if (!has(t, s, notOther)) {
    size_t j = s;
    while (j < end && !has(t, j, notOther)) ++j;
    return j;
  }
  if (!has(t, i, kWS)) return i;
  size_t j = runOf(t, i, end, kWS);
  if (j == end || j - i < 2) return j;
  return j - 1;
}

SplitMatcher knownSplitMatcher(std::string_view pattern) {
  std::string p = canonical(pattern);
  if (p == kLlama3) return &matchLlama3Family<3>;
  if (p == kQwen2) return &matchLlama3Family<1>;
  if (p == kO200k) return &matchO200k;
  if (p == kDigits3) return &matchDigits3;
  if (p == kDeepseekCjk) return &matchDeepseekCjk;
  if (p == kDeepseekMain) return &matchDeepseekMain;
  return nullptr;
}

}  // namespace kvgate::tok
