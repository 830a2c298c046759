// Decoder (decoder.h): the decode steps on tiny vocabularies, expected texts worked out by hand
// from HF tokenizers' decoders and transformers' clean-up (the full models are checked against
// the reference in tests/integration/tokenizer.test.mjs "decode parity").
#include "tokenizer/decoder.h"

#include <gtest/gtest.h>

namespace kvgate::tok {
namespace {

using J = nlohmann::json;
using Ids = std::vector<uint32_t>;

// A SentencePiece-style vocabulary with Llama-2's decoder.
J spm(J decoder) {
  J vocab = {{"<unk>", 0},
             {"\xE2\x96\x81Hello", 1},
             {"\xE2\x96\x81world", 2},
             {"<0xF0>", 3},
             {"<0x9F>", 4},
             {"<0x98>", 5},
             {"<0x80>", 6},
             {",", 7},
             {"<0xff>", 8}};
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", J::array()}}},
          {"added_tokens", J::array({{{"id", 9}, {"content", "<s>"}, {"special", true}},
                                     {{"id", 10}, {"content", "<tool>"}, {"special", false}}})},
          {"decoder", decoder}};
}
J llama2Decoder() {
  return {
      {"type", "Sequence"},
      {"decoders",
       J::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                 {{"type", "ByteFallback"}},
                 {{"type", "Fuse"}},
                 {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
}

TEST(Decoder, SentencePieceSequence) {
  const Decoder d = Decoder::fromJson(spm(llama2Decoder()), J::object());
  ASSERT_EQ(d.unsupported(), "");
  // "▁Hello" "▁world" -> " Hello world", one leading space stripped.
  EXPECT_EQ(*d.decode(Ids{1, 2}, false), "Hello world");
  // The special <s> first: nothing to strip ("<s>" does not start with a space).
  EXPECT_EQ(*d.decode(Ids{9, 1, 2}, false), "<s> Hello world");
  EXPECT_EQ(*d.decode(Ids{9, 1, 2}, true), "Hello world");
  // A non-special added token is kept even when skipping special ones.
  EXPECT_EQ(*d.decode(Ids{10, 1}, true), "<tool> Hello");
  // Byte fallback: F0 9F 98 80 is U+1F600; a run that is not valid UTF-8 is one U+FFFD a byte.
  EXPECT_EQ(*d.decode(Ids{1, 3, 4, 5, 6}, false), "Hello\xF0\x9F\x98\x80");
  EXPECT_EQ(*d.decode(Ids{3, 4, 7}, false), "\xEF\xBF\xBD\xEF\xBF\xBD,");
  // Lower-case hex is a byte token too.
  EXPECT_EQ(*d.decode(Ids{8}, false), "\xEF\xBF\xBD");
  // Ids that name no token are dropped.
  EXPECT_EQ(*d.decode(Ids{1, 99, 4000000000u, 2}, false), "Hello world");
  EXPECT_EQ(*d.decode(Ids{}, false), "");
  EXPECT_EQ(*d.token(1), "\xE2\x96\x81Hello");
  EXPECT_EQ(*d.token(9), "<s>");
  EXPECT_FALSE(d.token(99).has_value());
}

TEST(Decoder, ByteLevel) {
  // bytes_to_unicode: ' ' is U+0120 "Ġ", '\n' U+010A "Ċ"; 0xC3 0xA9 ("é") as "Ã©".
  J vocab = {{"\xC4\xA0"
              "a",
              0},
             {"\xC4\x8A", 1},
             {"\xC3\x83", 2},
             {"\xC2\xA9", 3},
             {"b", 4}};
  J tj = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", J::array()}}},
          {"added_tokens", J::array({{{"id", 5}, {"content", "<|end|>"}, {"special", true}},
                                     {{"id", 6},
                                      {"content",
                                       "<\xEF\xBD\x9C"
                                       "x\xEF\xBD\x9C>"},
                                      {"special", false}}})},
          {"decoder", {{"type", "ByteLevel"}}}};
  const Decoder d = Decoder::fromJson(tj, J::object());
  EXPECT_EQ(*d.decode(Ids{4, 0, 1}, false), "b a\n");
  EXPECT_EQ(*d.decode(Ids{2, 3}, false), "\xC3\xA9");
  // Half a character: U+FFFD (Rust's from_utf8_lossy).
  EXPECT_EQ(*d.decode(Ids{2, 4}, false),
            "\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(*d.decode(Ids{4, 5}, false), "b<|end|>");
  EXPECT_EQ(*d.decode(Ids{4, 5}, true), "b");
  // A token with a character outside the byte table contributes its own UTF-8 bytes.
  EXPECT_EQ(*d.decode(Ids{6, 0}, false),
            "<\xEF\xBD\x9C"
            "x\xEF\xBD\x9C> a");
}

TEST(Decoder, CleanUpFollowsTheConfigOrTheCaller) {
  J tj = spm(llama2Decoder());
  tj["model"]["vocab"]["\xE2\x96\x81."] = 11;
  const Decoder plain = Decoder::fromJson(tj, J::object());
  const Decoder clean = Decoder::fromJson(tj, {{"clean_up_tokenization_spaces", true}});
  EXPECT_FALSE(plain.cleanUpByDefault());
  EXPECT_TRUE(clean.cleanUpByDefault());
  EXPECT_EQ(*plain.decode(Ids{1, 11}, false), "Hello .");
  EXPECT_EQ(*clean.decode(Ids{1, 11}, false), "Hello.");
  EXPECT_EQ(*clean.decode(Ids{1, 11}, false, false), "Hello .");
  EXPECT_EQ(*plain.decode(Ids{1, 11}, false, true), "Hello.");
}

TEST(Decoder, CleanUpTokenizationAsTransformers) {
  // The replacements in transformers' order: " ' " before " 's", so "a ' s" -> "a's".
  EXPECT_EQ(cleanUpTokenization("Hi , you ! Is it ? Yes . I 'm sure it 's fine , we 've "
                                "seen they 're right and don n't"),
            "Hi, you! Is it? Yes. I'm sure it's fine, we've seen they're right and donn't");
  EXPECT_EQ(cleanUpTokenization("a ' s"), "a's");
  EXPECT_EQ(cleanUpTokenization("x != y"), "x!= y");
  EXPECT_EQ(cleanUpTokenization("  ."), " .");  // (one pass: " ." once)
  EXPECT_EQ(cleanUpTokenization(""), "");
}

TEST(Decoder, WhatDependsOnTheEngineOrItsConfig) {
  // A normalized added token under a normalizer decodes differently across HF tokenizers
  // versions: flagged, so the gateway forwards ids holding it. Without a normalizer, or for a
  // token not normalized, nothing depends on the version.
  J tj = spm(llama2Decoder());
  tj["added_tokens"].push_back({{"id", 11}, {"content", "<x>"}, {"normalized", true}});
  tj["normalizer"] = {{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}};
  Decoder d = Decoder::fromJson(tj, J::object());
  EXPECT_TRUE(d.versionDependent(11));
  EXPECT_TRUE(d.versionDependent(10));  // (not special: normalized unless it says otherwise)
  EXPECT_FALSE(d.versionDependent(9));  // (special: not normalized unless it says so)
  EXPECT_FALSE(d.versionDependent(1));  // (a vocabulary entry)
  tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", J::array()}};
  EXPECT_FALSE(Decoder::fromJson(tj, J::object()).versionDependent(11));
  // transformers marks special what tokenizer_config.json's added_tokens_decoder says is.
  d = Decoder::fromJson(spm(llama2Decoder()), {{"added_tokens_decoder",
                                                {{"10", {{"content", "<tool>"}, {"special", true}}},
                                                 {"x", {{"special", true}}},
                                                 {"99999999999", {{"special", true}}}}}});
  EXPECT_EQ(*d.decode(Ids{10, 1}, true), "Hello");
  // ... and what its special-token attributes name, even a plain vocabulary entry.
  d = Decoder::fromJson(spm(llama2Decoder()),
                        {{"eos_token", {{"content", ","}}},
                         {"additional_special_tokens", J::array({"\xE2\x96\x81world", 5})}});
  EXPECT_EQ(*d.decode(Ids{1, 7, 2}, false), "Hello, world");
  EXPECT_EQ(*d.decode(Ids{1, 7, 2}, true), "Hello");
  // An empty Sequence joins the tokens with nothing (no decoder joins with spaces).
  d = Decoder::fromJson(spm({{"type", "Sequence"}, {"decoders", J::array()}}), J::object());
  EXPECT_EQ(*d.decode(Ids{1, 7}, false), "\xE2\x96\x81Hello,");
  // A member of the wrong type is reported, not thrown.
  J bad = spm(llama2Decoder());
  bad["decoder"]["decoders"][3]["content"] = 5;
  EXPECT_FALSE(Decoder::fromJson(bad, J::object()).decode(Ids{1}, false).has_value());
  bad = spm(J{{"type", 7}});
  EXPECT_FALSE(Decoder::fromJson(bad, J::object()).decode(Ids{1}, false).has_value());
}

TEST(Decoder, UnsupportedDecodersAreReportedNotGuessed) {
  auto d =
      Decoder::fromJson(spm({{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}}), J::object());
  EXPECT_NE(d.unsupported().find("Metaspace"), std::string::npos);
  auto r = d.decode(Ids{1}, false);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, 422);
  d = Decoder::fromJson(spm({{"type", "Replace"}, {"pattern", {{"Regex", "x+"}}}, {"content", ""}}),
                        J::object());
  EXPECT_FALSE(d.decode(Ids{1}, false).has_value());
  // No decoder: tokens joined with spaces (HF's default).
  d = Decoder::fromJson(spm(nullptr), J::object());
  EXPECT_EQ(*d.decode(Ids{1, 7}, false), "\xE2\x96\x81Hello ,");
  // Hostile files: no vocabulary, ids past the id space, a vocabulary of the wrong shape.
  d = Decoder::fromJson(J::object(), J::object());
  EXPECT_FALSE(d.decode(Ids{1}, false).has_value());
  J huge = spm(llama2Decoder());
  huge["model"]["vocab"]["far"] = uint64_t{1} << 40;
  huge["model"]["vocab"]["neg"] = -4;
  d = Decoder::fromJson(huge, J::array());
  EXPECT_EQ(*d.decode(Ids{1}, false), "Hello");
  EXPECT_LT(d.idSpace(), size_t{1} << 25);
}

}  // namespace
}  // namespace kvgate::tok
