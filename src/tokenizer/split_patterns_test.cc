// Pre-tokenizer pieces for the known patterns, worked out by hand from the regexes' leftmost-first
// semantics (comments say which alternative produces each piece).
#include <gtest/gtest.h>
#include <simdjson.h>

#include <random>

#include "common/utf8.h"
#include "tokenizer/pretokenizer.h"

namespace kvgate::tok {
namespace {

std::vector<std::string> pieces(const char* pattern, std::string_view text) {
  nlohmann::json j = {{"type", "Split"},
                      {"pattern", {{"Regex", pattern}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  auto p = PreTokenizer::fromJson(j);
  EXPECT_TRUE(p.has_value());
  PreTokScratch sc;
  std::vector<std::string_view> out;
  p->split(text, true, sc, out);
  return {out.begin(), out.end()};
}

const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

using V = std::vector<std::string>;

TEST(SplitPatterns, Llama3Words) {
  EXPECT_EQ(pieces(kLlama3, "Hello world"), (V{"Hello", " world"}));
  // "'m" is a contraction; a lone space before digits is \s+; digits go in threes.
  EXPECT_EQ(pieces(kLlama3, "I'm 12345"), (V{"I", "'m", " ", "123", "45"}));
  // Case-insensitive contractions.
  EXPECT_EQ(pieces(kLlama3, "WE'LL"), (V{"WE", "'LL"}));
}

TEST(SplitPatterns, Llama3Whitespace) {
  // Two spaces before a word: \s+(?!\S) keeps the first, the second joins the word.
  EXPECT_EQ(pieces(kLlama3, "a  b"), (V{"a", " ", " b"}));
  // \s*[\r\n]+ ends at the last newline of the run; the space then prefixes the word.
  EXPECT_EQ(pieces(kLlama3, "x\n\n y"), (V{"x", "\n\n", " y"}));
  // Trailing whitespace at the end of the subject is one piece.
  EXPECT_EQ(pieces(kLlama3, "end   "), (V{"end", "   "}));
  // Punctuation run with an optional leading space and trailing newlines.
  EXPECT_EQ(pieces(kLlama3, "hi !?\n\nok"), (V{"hi", " !?\n\n", "ok"}));
}

TEST(SplitPatterns, QwenSingleDigits) {
  EXPECT_EQ(pieces(kQwen, "x 2024"), (V{"x", " ", "2", "0", "2", "4"}));
}

TEST(SplitPatterns, O200kCaseRuns) {
  // Upper run followed by lower run stays one word; lower then upper splits.
  EXPECT_EQ(pieces(kO200k, "HELLOworld"), (V{"HELLOworld"}));
  EXPECT_EQ(pieces(kO200k, "helloWORLD"), (V{"hello", "WORLD"}));
  EXPECT_EQ(pieces(kO200k, "HelloWorld"), (V{"Hello", "World"}));
  // Contractions attach to the word; slashes attach to punctuation.
  EXPECT_EQ(pieces(kO200k, "don't"), (V{"don't"}));
  EXPECT_EQ(pieces(kO200k, "a //b"), (V{"a", " //", "b"}));
}

TEST(SplitPatterns, OtherPatternsRunOnOniguruma) {
  // Not a known model pattern: compiled with Oniguruma. Leftmost-first alternation: at "a",
  // "[a-z]+" wins and stops at the digit; at "1" only "[a-z0-9]+" matches and takes "12cd".
  EXPECT_EQ(pieces("[a-z]+|[a-z0-9]+", "ab12cd"), (V{"ab", "12cd"}));
  // Unmatched text between matches is kept as its own piece (Isolated).
  EXPECT_EQ(pieces("[0-9]+", "ab12cd"), (V{"ab", "12", "cd"}));
  EXPECT_EQ(pieces(R"(\p{N}+)", "x١٢y"), (V{"x", "١٢", "y"}));
  // An invalid regex is a load error naming the problem.
  nlohmann::json j = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  auto p = PreTokenizer::fromJson(j);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().what.find("invalid Split regex"), std::string::npos);
}

TEST(SplitPatterns, StringSplitBehaviors) {
  auto run = [](const char* behavior, std::string_view text) {
    nlohmann::json j = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", behavior}};
    auto p = PreTokenizer::fromJson(j);
    EXPECT_TRUE(p.has_value());
    PreTokScratch sc;
    std::vector<std::string_view> out;
    p->split(text, true, sc, out);
    return V(out.begin(), out.end());
  };
  EXPECT_EQ(run("MergedWithPrevious", "a b  c"), (V{"a ", "b ", " ", "c"}));
  EXPECT_EQ(run("MergedWithNext", "a b  c"), (V{"a", " b", " ", " c"}));
  EXPECT_EQ(run("Removed", "a b  c"), (V{"a", "b", "c"}));
  EXPECT_EQ(run("Isolated", "a b"), (V{"a", " ", "b"}));
  EXPECT_EQ(run("Contiguous", "a  b"), (V{"a", "  ", "b"}));
}

TEST(Utf8Repair, WhatwgMaximalSubparts) {
  std::string out;
  EXPECT_TRUE(repairUtf8("plain \xC3\xA9", &out));
  const std::string R = "\xEF\xBF\xBD";
  ASSERT_FALSE(repairUtf8("\xC3\x28", &out));
  EXPECT_EQ(out, R + "(");
  ASSERT_FALSE(repairUtf8("a\xE2\x82", &out));  // truncated 3-byte sequence: one replacement
  EXPECT_EQ(out, "a" + R);
  ASSERT_FALSE(
      repairUtf8("\xF0\x90\x80"
                 "A",
                 &out));
  EXPECT_EQ(out, R + "A");
  ASSERT_FALSE(repairUtf8("\xED\xA0\x80", &out));  // a surrogate: each byte replaced
  EXPECT_EQ(out, R + R + R);
  ASSERT_FALSE(repairUtf8("\xC0\xAF\xFF", &out));  // overlong and never-valid bytes
  EXPECT_EQ(out, R + R + R);
}

// The validity check skips ASCII eight bytes at a time: at every alignment and run length it
// agrees with simdjson's UTF-8 validator (an independent implementation), and a string's valid
// prefix ends where simdjson first finds it invalid.
TEST(Utf8Repair, WordWiseCheckAgreesWithSimdjson) {
  std::mt19937 rng(34);
  const std::vector<std::string> pieces = {"a",
                                           "abcdefghij",
                                           " ",
                                           "\xC3\xA9",
                                           "\xE2\x82\xAC",
                                           "\xF0\x9F\x98\x80",
                                           "\xC3",
                                           "\x80",
                                           "\xED\xA0\x80",
                                           "\xF4\x90\x80\x80",
                                           "\xC0\xAF",
                                           "\xFF",
                                           "0123456"};
  for (int round = 0; round < 4000; ++round) {
    std::string s;
    for (unsigned i = 0, n = rng() % 12; i < n; ++i) {
      // Mostly valid text, so that long ASCII runs and late errors are common.
      const std::string& p = pieces[rng() % 4 == 0 ? rng() % pieces.size() : rng() % 6 % 3];
      for (unsigned k = 0, r = 1 + rng() % 5; k < r; ++k) s += p;
    }
    const bool valid = simdjson::validate_utf8(s.data(), s.size());
    EXPECT_EQ(isValidUtf8(s), valid) << s;
    const size_t prefix = validUtf8Prefix(s);
    EXPECT_EQ(prefix == s.size(), valid);
    EXPECT_TRUE(simdjson::validate_utf8(s.data(), prefix)) << s;
    std::string fixed;
    EXPECT_EQ(repairUtf8(s, &fixed), valid);
    if (!valid) {
      EXPECT_TRUE(simdjson::validate_utf8(fixed.data(), fixed.size()));
      EXPECT_EQ(fixed.substr(0, prefix), s.substr(0, prefix));
    }
  }
}

}  // namespace
}  // namespace kvgate::tok
