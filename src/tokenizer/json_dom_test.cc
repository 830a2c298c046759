#include "tokenizer/json_dom.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../tests/support/json_typed.h"

namespace kvgate::tok {
namespace {

using J = nlohmann::ordered_json;

std::string padded(std::string_view s) {
  std::string out;
  out.reserve(s.size() + domFromJsonPadding());
  out.assign(s);
  return out;
}

using testing::sameTyped;

// The reference is nlohmann's own parser: the DOM must be the same value, with the same member
// order and the same number types.
void expectSameAsNlohmann(std::string_view text) {
  SCOPED_TRACE(std::string(text.substr(0, 200)));
  const J want = J::parse(text);
  auto got = domFromJson(padded(text), 128);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->dump(), want.dump());
  EXPECT_TRUE(sameTyped(*got, want));
}

// What nlohmann refuses is refused; what both accept is the same DOM.
void expectNeverDiffers(const std::string& text) {
  SCOPED_TRACE(text.substr(0, 200));
  const J want = J::parse(text, nullptr, false);
  auto got = domFromJson(padded(text), 128);
  if (want.is_discarded()) {
    EXPECT_FALSE(got.has_value());
  } else if (got) {
    EXPECT_EQ(got->dump(), want.dump());
    EXPECT_TRUE(sameTyped(*got, want));
  }
}

TEST(JsonDom, SameDomAsNlohmannOnChatShapes) {
  expectSameAsNlohmann(R"({"messages":[{"role":"system","content":"You are \"kind\".\n\tTools:\u00e9 \ud83d\ude00 \/ \\"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:,x"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"n":{"type":"integer","minimum":-0,"maximum":1.0,"default":1e300}}}}}],"add_generation_prompt":true,"continue_final_message":false,"chat_template_kwargs":{"enable_thinking":null}})");
  // Integers at and past the 64-bit edges, floats, exponents: typed as nlohmann types them.
  expectSameAsNlohmann(R"({"a":[0,-0,1,-1,9223372036854775807,-9223372036854775808,18446744073709551615,18446744073709551616,-9223372036854775809,12345678901234567890123,1.5,-2.25e-3,1E+2,0.1]})");
  // A repeated key keeps its first place and takes its last value.
  expectSameAsNlohmann(R"({"a":1,"b":{"x":[]},"a":{"z":2},"c":"", "b" : true })");
  expectSameAsNlohmann("  {\"messages\" : [ ] , \"e\":{}}  \n");
}

TEST(JsonDom, SameDomOnRandomDocuments) {
  std::mt19937_64 rng(20261205);
  std::function<J(int)> gen = [&](int depth) -> J {
    switch (rng() % (depth > 6 ? 4 : 6)) {
      case 0: return J(static_cast<int64_t>(rng()) >> (rng() % 64));
      case 1: return J(static_cast<double>(rng() % 100000) / 7.0);
      case 2: {
        std::string s;
        for (int i = 0, n = static_cast<int>(rng() % 12); i < n; ++i) {
          const char* pieces[] = {"a", "\"", "\\", "\n", "\xc3\xa9", "\xf0\x9f\x98\x80", " ", "\x01", "/"};
          s += pieces[rng() % 9];
        }
        return J(s);
      }
      case 3: return rng() % 2 ? J(true) : J(nullptr);
      case 4: {
        J a = J::array();
        for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i) a.push_back(gen(depth + 1));
        return a;
      }
      default: {
        J o = J::object();
        for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i)
          o["k" + std::to_string(rng() % 6)] = gen(depth + 1);
        return o;
      }
    }
  };
  for (int i = 0; i < 500; ++i) {
    J doc = J::object();
    doc["messages"] = gen(1);
    expectSameAsNlohmann(doc.dump(i % 3 == 0 ? 2 : -1));
  }
}

// Byte mutations of chat-shaped documents (NUL and control bytes, whitespace, quotes,
// brackets, escapes, repeated keys, number edges spliced in at random places).
TEST(JsonDom, MutatedDocumentsNeverDiffer) {
  const std::vector<std::string> seeds = {
      R"({"messages":[{"role":"user","content":"hi \u00e9 \ud83d\ude00"}],"n":[1,-0,1.5e3,18446744073709551615]})",
      R"({"a":{"b":[true,false,null,{"c":"x"}]},"a":2,"d":"\\\"/"})",
      R"({"tools":[{"function":{"parameters":{"minimum":-9223372036854775808,"x":0.1}}}]})"};
  const std::vector<std::string> inserts = {std::string(1, '\0'), "\x01", " ", "\n", "\"", "\\",
      ",", ":", "{", "}", "[", "]", "0", "-", "e", ".", "\\u0000", "\\ud800", "\\udc00", "\xff",
      R"("a":1,)", "1e400", "\t"};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 4000; ++i) {
    std::string t = seeds[rng() % seeds.size()];
    for (int m = 0, n = 1 + static_cast<int>(rng() % 3); m < n; ++m) {
      const size_t at = rng() % (t.size() + 1);
      if (rng() % 4 == 0 && at < t.size())
        t.erase(at, 1);
      else
        t.insert(at, inserts[rng() % inserts.size()]);
    }
    expectNeverDiffers(t);
  }
  // The NUL after a number: simdjson's token, the end of nlohmann's input.
  expectNeverDiffers(std::string("{\"a\":1\0xyz}", 11));
  EXPECT_FALSE(domFromJson(padded(std::string("{\"a\":1\0\"x\"}", 11)), 128));
}

TEST(JsonDom, RefusesWhatTheFallbackMustJudge) {
  EXPECT_FALSE(domFromJson(padded(R"({"a":"\udc00"})"), 128));     // a lone low surrogate
  EXPECT_FALSE(domFromJson(padded("{\"a\":\"x\x01y\"}"), 128));     // a raw control byte
  EXPECT_FALSE(domFromJson(padded(R"({"a":"\ud800"})"), 128));   // a lone surrogate
  EXPECT_FALSE(domFromJson(padded(R"({"a":1} x)"), 128));        // trailing content
  EXPECT_FALSE(domFromJson(padded(R"({"a":[1,2)"), 128));         // cut short
  // A number nlohmann's parser refuses (it overflows a double) is refused here too.
  EXPECT_TRUE(J::parse(R"({"a":1e400})", nullptr, false).is_discarded());
  EXPECT_FALSE(domFromJson(padded(R"({"a":1e400})"), 128));
  EXPECT_FALSE(domFromJson(padded("{\"a\":\"\xff\"}"), 128));      // not UTF-8
  EXPECT_FALSE(domFromJson(std::string(R"({"a":1})"), 128));      // no room for the padding
  std::string deep(200, '[');
  deep += std::string(200, ']');
  EXPECT_FALSE(domFromJson(padded("{\"a\":" + deep + "}"), 128));  // deeper than the bound
  // The bound: the root object is level 1, so 127 more levels pass and 128 more do not.
  std::string ok(127, '[');
  ok += std::string(127, ']');
  expectSameAsNlohmann("{\"a\":" + ok + "}");
  std::string over(128, '[');
  over += std::string(128, ']');
  EXPECT_FALSE(domFromJson(padded("{\"a\":" + over + "}"), 128));
}

}  // namespace
}  // namespace kvgate::tok
