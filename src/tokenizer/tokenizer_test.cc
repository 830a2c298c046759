// Tokenizer pipeline on small hand-written tokenizer.json files: expected ids are worked out by
// hand from HF's BPE rules (lowest rank first, leftmost on ties), byte fallback, added tokens.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/json_depth.h"
#include "tokenizer/chat.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/registry.h"

namespace kvgate::tok {
namespace {

using Ids = std::vector<uint32_t>;

nlohmann::json charModel(nlohmann::json vocab, nlohmann::json merges) {
  return {{"type", "BPE"},        {"vocab", vocab},         {"merges", merges},
          {"unk_token", nullptr}, {"byte_fallback", false}, {"fuse_unk", false}};
}

std::shared_ptr<const Tokenizer> make(nlohmann::json tj,
                                      nlohmann::json cfg = nlohmann::json::object()) {
  auto t = Tokenizer::fromStrings(tj.dump(), cfg.dump(), "test");
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().what);
  return t ? *t : nullptr;
}

TEST(Bpe, LowestRankFirst) {
  // merges: rank0 "b c", rank1 "a b", rank2 "a bc". "abc": (b,c) rank 0 beats (a,b) rank 1,
  // then (a,bc) rank 2 -> "abc" (5). Merging "a b" first would have given [ab, c].
  auto t =
      make({{"model", charModel({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}},
                                {"b c", "a b", "a bc"})}});
  EXPECT_EQ(t->encode("abc", false), (Ids{5}));
  EXPECT_EQ(t->encode("ab", false), (Ids{3}));
  EXPECT_EQ(t->encode("cab", false), (Ids{2, 3}));
}

TEST(Bpe, TiesGoLeftmostShortAndLong) {
  auto t = make({{"model", charModel({{"a", 0}, {"aa", 1}, {"aaaa", 2}}, {"a a", "aa aa"})}});
  // "aaa": two equal-rank pairs; the leftmost merges -> [aa, a].
  EXPECT_EQ(t->encode("aaa", false), (Ids{1, 0}));
  // 101 letters (long-piece heap path): 50 "aa" then 25 "aaaa" and a trailing "a".
  Ids want(25, 2);
  want.push_back(0);
  EXPECT_EQ(t->encode(std::string(101, 'a'), false), want);
  // 7 letters (short path): aa aa aa a -> aaaa aa a.
  EXPECT_EQ(t->encode("aaaaaaa", false), (Ids{2, 1, 0}));
  EXPECT_EQ(t->count("aaaaaaa", false), 3u);
}

TEST(Bpe, ConcurrentEncodesAgree) {
  // Per-thread caches and scratch: 8 threads encoding the same inputs get the hand-computed ids.
  auto t = make({{"model", charModel({{"a", 0}, {"aa", 1}, {"aaaa", 2}}, {"a a", "aa aa"})}});
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        if (t->encode("aaa", false) != Ids{1, 0}) ++bad;
        if (t->encode("aaaaaaa", false) != Ids{2, 1, 0}) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(Bpe, IgnoreMergesEmitsWholeVocabEntries) {
  // "abc" is in the vocab but no merge path builds it; ignore_merges emits it whole.
  nlohmann::json m = charModel({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}}, {"a b"});
  EXPECT_EQ(make({{"model", m}})->encode("abc", false), (Ids{3, 2}));
  m["ignore_merges"] = true;
  EXPECT_EQ(make({{"model", m}})->encode("abc", false), (Ids{4}));
}

TEST(Bpe, ByteFallbackAndUnk) {
  nlohmann::json vocab = {{"<unk>", 0}, {"a", 1}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 2 + b;
  }
  nlohmann::json m = charModel(vocab, nlohmann::json::array());
  m["unk_token"] = "<unk>";
  m["byte_fallback"] = true;
  // "é" = C3 A9 is not in the vocab: two byte tokens.
  EXPECT_EQ(make({{"model", m}})->encode("a\xC3\xA9", false), (Ids{1, 2 + 0xC3, 2 + 0xA9}));
  m["byte_fallback"] = false;
  m["fuse_unk"] = true;
  // Without fallback: unknown characters become <unk>, consecutive ones fused.
  EXPECT_EQ(make({{"model", m}})
                ->encode("\xC3\xA9\xC3\xA9"
                         "a",
                         false),
            (Ids{0, 1}));
}

TEST(Bpe, ByteLevelVocabularyIsDecoded) {
  // Byte-level vocab: bytes_to_unicode maps ' ' (0x20) to U+0120 "Ġ". " a" -> "Ġa".
  nlohmann::json vocab = nlohmann::json::object();
  uint32_t n = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    uint32_t cp = printable ? b : 0x100 + n++;
    std::string s;
    appendUtf8(s, cp);
    vocab[s] = b;
  }
  vocab
      ["\xC4\xA0"
       "a"] = 256;  // "Ġa"
  nlohmann::json tj = {
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"model", charModel(vocab, {"\xC4\xA0 a"})}};
  auto t = make(tj);
  // GPT-2 split: "b", " a", " a" -> [b] [Ġa] [Ġa]; the newline is byte 0x0A -> id 10.
  EXPECT_EQ(t->encode("b a a\n", false), (Ids{'b', 256, 256, 10}));
}

nlohmann::json tinyWithAdded(nlohmann::json added) {
  return {{"added_tokens", added},
          {"model", charModel({{"a", 0}, {"b", 1}, {" ", 2}, {"<", 3}, {">", 4}, {"x", 5}},
                              nlohmann::json::array())}};
}

TEST(AddedTokens, LeftmostLongestAndFlags) {
  auto tok = [](uint32_t id, const char* c, bool lstrip = false, bool rstrip = false,
                bool single = false) {
    return nlohmann::json{{"id", id},           {"content", c},     {"special", true},
                          {"lstrip", lstrip},   {"rstrip", rstrip}, {"single_word", single},
                          {"normalized", false}};
  };
  auto t = make(tinyWithAdded({tok(10, "<x>"), tok(11, "<x><x>")}));
  // The longer token wins at the same start; matching resumes after it.
  EXPECT_EQ(t->encode("a<x><x><x>b", false), (Ids{0, 11, 10, 1}));
  // lstrip/rstrip absorb the surrounding spaces.
  // (json::array: a one-element braced list is the element itself under clang, an array under
  // g++; the sanitizer legs build with clang)
  t = make(tinyWithAdded(nlohmann::json::array({tok(10, "<x>", true, true)})));
  EXPECT_EQ(t->encode("a  <x>  b", false), (Ids{0, 10, 1}));
  // single_word: a match touching a word character is not a token.
  t = make(tinyWithAdded(nlohmann::json::array({tok(10, "x", false, false, true)})));
  EXPECT_EQ(t->encode("ax x", false), (Ids{0, 5, 2, 10}));
}

TEST(AddedTokens, NormalizedTokensMatchAfterNormalization) {
  // Prepend "▁" and Replace " " -> "▁" (Llama-2 style). HF normalizes a normalized token's
  // content too, so the token "a" is matched as "▁a" in normalized text. Every text segment gets
  // the prefix.
  nlohmann::json tj = {
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"added_tokens",
       {{{"id", 20}, {"content", "a"}, {"special", false}, {"normalized", true}},
        {{"id", 21}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
      {"model", charModel({{"\xE2\x96\x81", 0}, {"a", 1}, {"b", 2}}, nlohmann::json::array())}};
  auto t = make(tj);
  // "a<s> b": segments "a" -> "▁a" (token 20), "<s>" (21), " b" -> "▁▁b" -> [▁, ▁, b].
  EXPECT_EQ(t->encode("a<s> b", false), (Ids{20, 21, 0, 0, 2}));
}

TEST(PostProcessor, TemplateAndTransformersClassRules) {
  nlohmann::json tj = tinyWithAdded({{{"id", 30}, {"content", "<bos>"}, {"special", true}},
                                     {{"id", 31}, {"content", "<eos>"}, {"special", true}}});
  tj["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {30}}, {"tokens", {"<bos>"}}}}}}};
  EXPECT_EQ(make(tj)->encode("a", true), (Ids{30, 0}));
  EXPECT_EQ(make(tj)->encode("a", false), (Ids{0}));
  // A Llama-class config overrides the file's processor from add_bos_token/add_eos_token.
  nlohmann::json cfg = {{"tokenizer_class", "LlamaTokenizerFast"},
                        {"bos_token", "<bos>"},
                        {"eos_token", {{"content", "<eos>"}, {"__type", "AddedToken"}}},
                        {"add_bos_token", false},
                        {"add_eos_token", true}};
  EXPECT_EQ(make(tj, cfg)->encode("a", true), (Ids{0, 31}));
  tj.erase("post_processor");  // DeepSeek-V3: no processor in the file, BOS from the class rule
  cfg = {{"tokenizer_class", "LlamaTokenizerFast"}, {"bos_token", "<bos>"}};
  EXPECT_EQ(make(tj, cfg)->encode("a", true), (Ids{30, 0}));
  // Other classes keep the file's (absent) processor.
  cfg["tokenizer_class"] = "Qwen2Tokenizer";
  EXPECT_EQ(make(tj, cfg)->encode("a", true), (Ids{0}));
}

TEST(Loading, ErrorsNameTheFile) {
  auto dir =
      std::filesystem::temp_directory_path() / ("kvgate-tok-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "org" / "good");
  std::filesystem::create_directories(dir / "org" / "corrupt");
  std::filesystem::create_directories(dir / "org" / "empty");
  std::ofstream(dir / "org" / "good" / "tokenizer.json")
      << tinyWithAdded(nlohmann::json::array()).dump();
  std::ofstream(dir / "org" / "corrupt" / "tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 0)";
  TokenizerRegistry reg(dir);
  auto good = reg.get("org/good");
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ((*good)->encode("ab", false), (Ids{0, 1}));
  auto corrupt = reg.get("org/corrupt");
  ASSERT_FALSE(corrupt.has_value());
  EXPECT_EQ(corrupt.error().code, 422);
  EXPECT_NE(corrupt.error().what.find("org/corrupt/tokenizer.json"), std::string::npos);
  auto empty = reg.get("org/empty");
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code, 404);
  EXPECT_EQ(empty.error().source, "tokenize");
  EXPECT_NE(empty.error().what.find("no tokenizer files for model org/empty"), std::string::npos);
  EXPECT_EQ(reg.get("nope").error().code, 404);
  for (const char* bad : {"", "../etc", "/abs", "a//b", "a/./b", "a\\b", "a\nb"})
    EXPECT_EQ(reg.get(bad).error().code, 400) << bad;
  std::filesystem::remove_all(dir);
}

TEST(Loading, UnsupportedFeaturesAreClearErrors) {
  nlohmann::json tj = tinyWithAdded(nlohmann::json::array());
  tj["normalizer"] = {{"type", "Precompiled"}};
  auto t = Tokenizer::fromStrings(tj.dump(), "", "x");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().what.find("unsupported normalizer type 'Precompiled'"), std::string::npos);
  tj.erase("normalizer");
  tj["model"]["merges"] = {"a zz"};
  t = Tokenizer::fromStrings(tj.dump(), "", "x");
  ASSERT_FALSE(t.has_value());
  EXPECT_NE(t.error().what.find("merge #0"), std::string::npos);
  EXPECT_FALSE(Tokenizer::fromStrings("[1,2]", "", "x").has_value());
  EXPECT_FALSE(Tokenizer::fromStrings(R"({"model": 5})", "", "x").has_value());
}

TEST(Chat, RequestMappingErrors) {
  using J = nlohmann::ordered_json;
  EXPECT_EQ(
      chatInputFromRequest(J::parse(R"({"messages": 5})"), ContentFormat::kString).error().source,
      "messages");
  EXPECT_FALSE(
      chatInputFromRequest(J::parse(R"({"messages": [{"content": "x"}]})"), ContentFormat::kString)
          .has_value());
  EXPECT_FALSE(chatInputFromRequest(J::parse(R"({"messages": [{"role": "user", "content": 5}]})"),
                                    ContentFormat::kString)
                   .has_value());
  // vLLM: unparsable tool-call arguments become {} (docs/chat-templates.md §2.8); "3" parses to 3.
  auto calls = chatInputFromRequest(
      J::parse(
          R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}},
                                                                     {"function": {"name": "g", "arguments": " 3 "}}]}]})"),
      ContentFormat::kString);
  ASSERT_TRUE(calls.has_value());
  EXPECT_EQ(calls->messages[0]["tool_calls"][0]["function"]["arguments"], J::object());
  EXPECT_EQ(calls->messages[0]["tool_calls"][1]["function"]["arguments"], 3);
  EXPECT_EQ(calls->messages[0]["content"], "");  // null content -> "" in the string format
  // Media parts are an error for text-only models; unknown part types too.
  EXPECT_FALSE(
      chatInputFromRequest(
          J::parse(
              R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})"),
          ContentFormat::kString)
          .has_value());
  EXPECT_FALSE(chatInputFromRequest(
                   J::parse(R"({"messages": [{"role": "user", "content": [{"type": "video"}]}]})"),
                   ContentFormat::kString)
                   .has_value());
  EXPECT_FALSE(
      chatInputFromRequest(
          J::parse(
              R"({"messages": [], "add_generation_prompt": true, "continue_final_message": true})"),
          ContentFormat::kString)
          .has_value());
  EXPECT_FALSE(chatInputFromRequest(
                   J::parse(R"({"messages": [], "chat_template_kwargs": {"tokenize": true}})"),
                   ContentFormat::kString)
                   .has_value());
  // Text parts joined with newlines in the string format; kept as parts in the openai format.
  auto in = chatInputFromRequest(
      J::parse(
          R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})"),
      ContentFormat::kString);
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->messages[0]["content"], "a\nb");
  // Tools get pydantic's defaults: type "function", description and parameters null.
  auto tools = chatInputFromRequest(
      J::parse(R"({"messages": [], "tools": [{"function": {"name": "f", "strict": true}}]})"),
      ContentFormat::kString);
  ASSERT_TRUE(tools.has_value());
  EXPECT_EQ(
      tools->tools.dump(),
      R"([{"type":"function","function":{"name":"f","description":null,"parameters":null,"strict":true}}])");
}

TEST(Loading, HostileFilesAreErrorsNotCrashes) {
  auto loadErr = [](nlohmann::json tj, nlohmann::json cfg = nlohmann::json::object()) {
    auto t = Tokenizer::fromStrings(tj.dump(), cfg.dump(), "x");
    EXPECT_FALSE(t.has_value());
    return t ? std::string() : t.error().what;
  };
  nlohmann::json base = tinyWithAdded(nlohmann::json::array());
  auto tj = base;
  tj["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}};  // no cls
  EXPECT_NE(loadErr(tj).find("cls must be [token, id]"), std::string::npos);
  tj["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>"}}, {"cls", {"<s>", 0}}};
  EXPECT_NE(loadErr(tj).find("sep must be"), std::string::npos);
  // Wrong JSON types in the config: a 422, not an exception.
  EXPECT_NE(loadErr(base, {{"tokenizer_class", "LlamaTokenizer"}, {"add_bos_token", "yes"}})
                .find("unexpected value"),
            std::string::npos);
  EXPECT_NE(loadErr(base, {{"tokenizer_class", nullptr}}).find("unexpected value"),
            std::string::npos);
  tj = base;
  tj["model"]["dropout"] = "0";
  EXPECT_FALSE(loadErr(tj).empty());
  tj = base;
  tj["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", ""}};
  EXPECT_NE(loadErr(tj).find("exactly one character"), std::string::npos);
  tj["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", {{{"type", "ByteLevel"}, {"use_regex", false}}, {{"type", "Digits"}}}}};
  EXPECT_NE(loadErr(tj).find("after ByteLevel"), std::string::npos);
  tj = base;
  tj["model"]["vocab"]["big"] = 4294967295ull;
  EXPECT_NE(loadErr(tj).find("out of range"), std::string::npos);
}

TEST(Bpe, DuplicateMergeKeepsTheLastListingAsHfDoes) {
  // "a b" listed at ranks 0 and 2: HF's map keeps rank 2, so "b c" (rank 1) merges first.
  auto t = make({{"model", charModel({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}},
                                     {"a b", "b c", "a b"})}});
  EXPECT_EQ(t->encode("abc", false), (Ids{0, 4}));
}

TEST(Bpe, ByteFallbackIsDecidedPerCharacter) {
  // Only <0xC3> and <0xA9> exist: "é" (C3 A9) falls back to bytes, "ü" (C3 BC) becomes unk.
  nlohmann::json m =
      charModel({{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}}, nlohmann::json::array());
  m["unk_token"] = "<unk>";
  m["byte_fallback"] = true;
  EXPECT_EQ(make({{"model", m}})
                ->encode("\xC3\xA9\xC3\xBC"
                         "a",
                         false),
            (Ids{2, 3, 0, 1}));
}

TEST(SplitBehavior, ContiguousWithInvertMergesEqualRuns) {
  nlohmann::json j = {{"type", "Split"},
                      {"pattern", {{"String", "a"}}},
                      {"behavior", "Contiguous"},
                      {"invert", true}};
  auto p = PreTokenizer::fromJson(j);
  ASSERT_TRUE(p.has_value());
  PreTokScratch sc;
  std::vector<std::string_view> out;
  p->split("aab", true, sc, out);
  EXPECT_EQ(std::vector<std::string>(out.begin(), out.end()),
            (std::vector<std::string>{"aa", "b"}));
}

TEST(Chat, HostileRequests) {
  using J = nlohmann::ordered_json;
  // Deeply nested arguments inside a string: a 400, not a stack overflow when copied later.
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  J body = {{"messages",
             {{{"role", "assistant"},
               {"content", ""},
               {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", deep}}}}}}}}}};
  auto r = chatInputFromRequest(body, ContentFormat::kString);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().what.find("nested too deeply"), std::string::npos);
  // chat_template_kwargs may not replace the conversation; a tool call needs a function.
  EXPECT_FALSE(chatInputFromRequest(
                   J::parse(R"({"messages": [], "chat_template_kwargs": {"messages": []}})"),
                   ContentFormat::kString)
                   .has_value());
  EXPECT_FALSE(
      chatInputFromRequest(
          J::parse(R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "x"}]}]})"),
          ContentFormat::kString)
          .has_value());
  // Absent arguments become {} (vLLM), a bare tool_reference part is its name.
  auto ok = chatInputFromRequest(
      J::parse(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
                                {"role": "user", "content": [{"tool_reference": "search"}]}]})"),
      ContentFormat::kString);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->messages[0]["tool_calls"][0]["function"]["arguments"], J::object());
  EXPECT_EQ(ok->messages[1]["content"], "search");
}

TEST(JsonDepth, RejectsDeepNestingOutsideStrings) {
  EXPECT_TRUE(jsonDepthWithin(R"({"a": [[1], {"b": 2}]})", 3));
  EXPECT_FALSE(jsonDepthWithin(R"({"a": [[1], {"b": 2}]})", 2));
  // Brackets inside strings (with escaped quotes) do not count.
  EXPECT_TRUE(jsonDepthWithin(R"({"a": "[[[[\"[[[[", "b": 1})", 1));
  EXPECT_FALSE(jsonDepthWithin(std::string(200000, '[') + std::string(200000, ']')));
}

TEST(Chat, ContentFormatDetection) {
  // vLLM's "openai" format when the template loops over a message's content (Gemma-3 style).
  EXPECT_EQ(
      detectContentFormat("{%- for item in message['content'] -%}{{ item.text }}{% endfor %}"),
      ContentFormat::kOpenAI);
  EXPECT_EQ(detectContentFormat("{% for part in m.content %}{% endfor %}"), ContentFormat::kOpenAI);
  EXPECT_EQ(detectContentFormat("{% for m in messages %}{{ m['content'] }}{% endfor %}"),
            ContentFormat::kString);
}

}  // namespace
}  // namespace kvgate::tok
