// RequestTokenizer over a real models folder holding the tiny tokenizer of
// tests/support/tiny_tokenizer.h (one id per character: ids worked out by hand).
#include "tokenizer/request_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "../../tests/support/test_util.h"
#include "../../tests/support/tiny_tokenizer.h"

namespace kvgate::tok {
namespace {

using routing::TokensStatus;
using Ids = std::vector<uint32_t>;
namespace fs = std::filesystem;

struct Dir {
  fs::path path;
  Dir() {
    path = fs::temp_directory_path() / ("kvgate_reqtok_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(path);
    testing::writeTinyTokenizer(path, "tiny/model");
  }
  ~Dir() { fs::remove_all(path); }
};

routing::RequestFacts completion(std::string text, std::string model = "tiny/model") {
  routing::RequestFacts f;
  f.parsed = true;
  f.has_model = !model.empty();
  f.model = std::move(model);
  f.prompt_text = std::move(text);
  return f;
}

routing::RequestFacts chat(std::string messages, std::string extras = "") {
  routing::RequestFacts f;
  f.parsed = f.has_model = true;
  f.model = "tiny/model";
  // (the chat input as the facts parser converts it from the body)
  f.chat = std::make_shared<nlohmann::ordered_json>(nlohmann::ordered_json::parse(
      "{\"messages\":" + messages + (extras.empty() ? "" : "," + extras) + "}"));
  return f;
}

// Waits (one-sided bound) until the loader thread has the model.
bool loaded(const RequestTokenizer& rt, const std::string& model) {
  return testing::waitUntil([&] { return rt.find(model) != nullptr; });
}

TEST(RequestTokenizer, LoadsOffTheCallerThenTokenizesCompletions) {
  Dir d;
  TokenizerRegistry reg(d.path);
  RequestTokenizer rt(reg);
  Ids ids;
  // The first call only queues the load: the caller (an event loop) never waits for files.
  EXPECT_EQ(rt.tokens(completion("abc"), ids), TokensStatus::kNotLoaded);
  ASSERT_TRUE(loaded(rt, "tiny/model"));
  EXPECT_EQ(rt.stats().loaded.load(), 1u);
  EXPECT_EQ(rt.tokens(completion("abc 0"), ids), TokensStatus::kOk);
  EXPECT_EQ(ids, (Ids{10, 11, 12, 64, 0}));  // a=10, b=11, c=12, ' '=64, '0'=0
}

TEST(RequestTokenizer, ChatRequestsAreRenderedWithTheTemplate) {
  Dir d;
  TokenizerRegistry reg(d.path);
  RequestTokenizer rt(reg);
  ASSERT_TRUE(loaded(rt, "tiny/model"));
  Ids ids;
  // The template concatenates contents: "ab" + "c".
  auto f = chat(R"([{"role":"user","content":"ab"},{"role":"assistant","content":"c"}])",
                R"("add_generation_prompt":true,"chat_template_kwargs":{"x":1})");
  EXPECT_EQ(rt.tokens(f, ids), TokensStatus::kOk);
  EXPECT_EQ(ids, (Ids{10, 11, 12}));
  // The second turn extends the first: the incremental encoder gives the same ids as a fresh one.
  auto g = chat(R"([{"role":"user","content":"ab"},{"role":"assistant","content":"c"},)"
                R"({"role":"user","content":"d"}])");
  EXPECT_EQ(rt.tokens(g, ids), TokensStatus::kOk);
  EXPECT_EQ(ids, (Ids{10, 11, 12, 13}));
  // Malformed chat requests are failures, not crashes: a non-boolean flag, messages that are
  // not objects, both generation flags, a chat the facts parser found past its bound.
  auto too_large = chat("[]");
  too_large.chat.reset();
  too_large.chat_too_large = true;
  const uint64_t too_large_before = rt.stats().too_large.load();
  for (auto bad : {chat(R"([{"role":"user","content":"a"}])", R"("add_generation_prompt":5)"),
                   chat(R"([1,2])"),
                   chat(R"([{"role":"user","content":"a"}])",
                        R"("add_generation_prompt":true,"continue_final_message":true)"),
                   too_large}) {
    EXPECT_EQ(rt.tokens(bad, ids), TokensStatus::kFailed) << (bad.chat ? bad.chat->dump() : "");
    EXPECT_TRUE(ids.empty());
  }
  EXPECT_EQ(rt.stats().too_large.load(), too_large_before + 1);
}

TEST(RequestTokenizer, EmptyTextAndMissingModelAreTheirOwnReasons) {
  Dir d;
  TokenizerRegistry reg(d.path);
  RequestTokenizer rt(reg);
  Ids ids{1};
  EXPECT_EQ(rt.tokens(completion(""), ids), TokensStatus::kTextEmpty);
  EXPECT_TRUE(ids.empty());
  EXPECT_EQ(rt.tokens(completion("abc", ""), ids), TokensStatus::kModelEmpty);
}

TEST(RequestTokenizer, UnknownModelsAreRetriedOnlyAfterTheRetryDelay) {
  Dir d;
  TokenizerRegistry reg(d.path);
  RequestTokenizerOptions o;
  o.retry_after = std::chrono::hours(1);
  RequestTokenizer rt(reg, o);
  EXPECT_EQ(rt.find("no/such"), nullptr);
  ASSERT_TRUE(testing::waitUntil([&] { return rt.stats().load_failures.load() == 1; }));
  // Within the delay: not queued again, so no second failure however often it is asked.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(rt.find("no/such"), nullptr);
  // A name that is not a relative path is never queued (no file access at all).
  EXPECT_EQ(rt.find("../etc"), nullptr);
  EXPECT_EQ(rt.find("/abs"), nullptr);
  ASSERT_TRUE(loaded(rt, "tiny/model"));  // the loader is alive and went past those
  EXPECT_EQ(rt.stats().load_failures.load(), 1u);

  RequestTokenizerOptions now;
  now.retry_after = std::chrono::milliseconds(0);
  RequestTokenizer again(reg, now);
  EXPECT_EQ(again.find("no/such"), nullptr);
  ASSERT_TRUE(testing::waitUntil([&] { return again.stats().load_failures.load() == 1; }));
  EXPECT_EQ(again.find("no/such"), nullptr);  // retried at once
  EXPECT_TRUE(testing::waitUntil([&] { return again.stats().load_failures.load() == 2; }));
}

TEST(RequestTokenizer, LongTextsAreCutNearTheBoundAndTheTailDropped) {
  Dir d;
  TokenizerRegistry reg(d.path);
  RequestTokenizerOptions o;
  o.max_bytes = 1024;
  RequestTokenizer rt(reg, o);
  ASSERT_TRUE(loaded(rt, "tiny/model"));
  Ids ids;
  size_t cut = 99;
  // 600 'a', a space, 600 'b' (1201 bytes): cut at the space (byte 600), 600 ids, minus 32; the
  // cut is estimated as the 601 bytes left out at 4 a token, rounded up, plus the 32 dropped:
  // 151 + 32 = 183.
  EXPECT_EQ(rt.tokens(completion(std::string(600, 'a') + " " + std::string(600, 'b')), ids, &cut),
            TokensStatus::kOk);
  EXPECT_EQ(ids, Ids(600 - RequestTokenizer::kTailDrop, 10));
  EXPECT_EQ(cut, 183u);
  // No space near the bound: cut at 1024 bytes, 1024 - 32 ids; 976 bytes out: 244 + 32 = 276.
  EXPECT_EQ(rt.tokens(completion(std::string(2000, 'c')), ids, &cut), TokensStatus::kOk);
  EXPECT_EQ(ids, Ids(1024 - RequestTokenizer::kTailDrop, 12));
  EXPECT_EQ(cut, 276u);
  EXPECT_EQ(rt.stats().truncated.load(), 2u);
  // At the bound: not cut.
  EXPECT_EQ(rt.tokens(completion(std::string(1024, 'c')), ids, &cut), TokensStatus::kOk);
  EXPECT_EQ(ids.size(), 1024u);
  EXPECT_EQ(cut, 0u);
}

}  // namespace
}  // namespace kvgate::tok
