// RequestFacts parsing and the prefix key. Expected keys are computed here by hand from the
// documented rendering (XXH3 over model NUL salt NUL rendered), not by the code under test.
#include "proxy/facts_parser.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "../../tests/support/json_typed.h"
#include "routing/prefix_key.h"

namespace kvgate::proxy {
namespace {

using routing::RequestFacts;
constexpr uint32_t kKeyNeeds =
    routing::kNeedModel | routing::kNeedPromptPrefix | routing::kNeedUser;

uint64_t expected(std::string_view model, std::string_view salt, std::string_view rendered) {
  std::string m(model);
  m.push_back('\0');
  m += salt;
  m.push_back('\0');
  m += rendered;
  return XXH3_64bits(m.data(), m.size());
}

FactsStatus parse(std::string_view body, RequestFacts& f, uint32_t needs = kKeyNeeds,
                  size_t k = 1024) {
  return parseFacts(body.data(), body.size(), 0, needs, k, f);  // capacity 0: the parser copies
}

std::optional<uint64_t> keyOf(std::string_view body, size_t k = 1024) {
  RequestFacts f;
  parse(body, f, kKeyNeeds, k);
  return routing::prefixKey(f);
}

TEST(PrefixKey, ChatRenderingByHand) {
  auto k = keyOf(
      R"({"model":"m","messages":[{"role":"system","content":"Be brief."},)"
      R"({"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":" there"}]}]})");
  ASSERT_TRUE(k);
  EXPECT_EQ(*k, expected("m", "",
                         "system\x1f"
                         "Be brief.\x1euser\x1fHi there\x1e"));
}

TEST(PrefixKey, OnlyTheFirstKBytesCount) {
  std::string a = R"({"model":"m","prompt":"SHAREDPREFIX-one"})";
  std::string b = R"({"model":"m","prompt":"SHAREDPREFIX-two"})";
  EXPECT_EQ(*keyOf(a, 12), *keyOf(b, 12));
  EXPECT_EQ(*keyOf(a, 12), expected("m", "", "SHAREDPREFIX"));
  EXPECT_NE(*keyOf(a), *keyOf(b));
}

TEST(PrefixKey, ModelAndCacheSaltSeparateKeys) {
  EXPECT_NE(*keyOf(R"({"model":"m","prompt":"x"})"), *keyOf(R"({"model":"n","prompt":"x"})"));
  EXPECT_EQ(*keyOf(R"({"model":"m","prompt":"x","cache_salt":"tenant-a"})"),
            expected("m", "tenant-a", "x"));
}

TEST(PrefixKey, TokenIdPromptsAndUser) {
  RequestFacts f;
  ASSERT_EQ(parse(R"({"model":"m","prompt":[1,22,333],"user":"alice"})", f), FactsStatus::kOk);
  EXPECT_EQ(*routing::prefixKey(f), expected("m", "", "1,22,333,"));
  EXPECT_EQ(*f.user, "alice");
}

TEST(Facts, ReadsTopLevelModelOnlyAndLastDuplicateWins) {
  RequestFacts f;
  EXPECT_EQ(parse(R"({"messages":[{"role":"user","content":"hi"}],"model":"llama-3"})", f),
            FactsStatus::kOk);
  EXPECT_EQ(f.model, "llama-3");
  EXPECT_EQ(parse(R"({"model":"a\u00e9b"})", f), FactsStatus::kOk);
  EXPECT_EQ(f.model,
            "a\xc3\xa9"
            "b");  // escapes decoded
  EXPECT_EQ(parse(R"({"tools":[{"model":"x"}],"metadata":{"model":"y"}})", f), FactsStatus::kOk);
  EXPECT_FALSE(f.has_model);
  EXPECT_FALSE(f.model_ambiguous);
  EXPECT_EQ(parse(R"({"model":"a","model":"b"})", f), FactsStatus::kOk);
  EXPECT_EQ(f.model, "b");  // as Python's json (the engine's view)
  EXPECT_TRUE(f.model_ambiguous);  // ... but other readers keep the first: never acted on
}

// Issue 28 §1.1: the model a key is checked against must be the one the engine serves. Python's
// json (the engines') accepts a lone surrogate escape in a key and keeps the last duplicate, so
// {"model":"allowed","\ud800":0,"model":"secret"} is served as "secret". Before the fix the walk
// stopped at the undecodable key and kept "allowed".
TEST(Facts, AmbiguousModelIsFlagged) {
  struct Case {
    std::string body;
    bool ambiguous;
    const char* model;  // nullptr: no model
  };
  const Case cases[] = {
      {R"({"model":"allowed","\ud800":0,"model":"secret"})", true, "secret"},
      {R"({"\ud800":0,"model":"secret"})", false, "secret"},  // the walk goes past the key
      {R"({"model":"m","messages":[{"role":"user","\udc00":1,"content":"hi"}]})", false, "m"},
      {R"({"model":"m","x":{"model":"y"},"y":[{"model":"z"}]})", false, "m"},  // nested: not ours
      {R"({"mod\u0065l":"a","model":"b"})", true, "b"},  // an escaped name is the same key
      {R"({"model":"a\ud800"})", true, nullptr},         // undecodable: the engine reads it
      {R"({"model":null})", false, nullptr},             // the engine's default model
      {R"({"model":5})", false, nullptr},                // the engine refuses it
      {"{\"model\":\"" + std::string(kMaxFactString + 1, 'm') + "\"}", true, nullptr},
      // A deep value is skipped, not a reason to stop: the model after it is read (and a
      // repeated one is still seen).
      {"{\"x\":" + std::string(5000, '[') + std::string(5000, ']') + ",\"model\":\"b\"}",
       false, "b"},
      {"{\"model\":\"a\",\"x\":" + std::string(5000, '[') + std::string(5000, ']') +
           ",\"model\":\"b\"}",
       true, "b"},
  };
  for (const auto& c : cases) {
    RequestFacts f;
    EXPECT_EQ(parse(c.body, f), FactsStatus::kOk) << c.body.substr(0, 80);
    EXPECT_EQ(f.model_ambiguous, c.ambiguous) << c.body.substr(0, 80);
    EXPECT_EQ(f.has_model, c.model != nullptr) << c.body.substr(0, 80);
    if (c.model) {
      EXPECT_EQ(f.model, c.model) << c.body.substr(0, 80);
    }
  }
  // A body too large to parse: its model is unknown.
  RequestFacts f;
  std::string huge(kMaxParseBytes + 1, ' ');
  EXPECT_EQ(parseFacts(huge.data(), huge.size(), 0, routing::kNeedModel, 1024, f),
            FactsStatus::kTooLarge);
  EXPECT_TRUE(f.model_ambiguous);
  // Reused facts start clean.
  EXPECT_EQ(parse(R"({"model":"m"})", f), FactsStatus::kOk);
  EXPECT_FALSE(f.model_ambiguous);
}

// Bug 6 of issue 9: valid JSON of an unexpected shape is routed without a key, never invalid_json.
TEST(Facts, ValidJsonOfOtherShapesIsNotInvalid) {
  for (std::string_view body :
       {R"({"model":"m","messages":"hi"})", R"({"model":"m","prompt":5})",
        R"({"model":"m","messages":[1,"x",null]})",
        R"({"model":"m","messages":[{"role":"user","content":7}]})",
        R"({"model":"m","prompt":[[1,2],[3]]})", R"({"model":"m","prompt":[1e400]})",
        R"({"model":"m","prompt":[99999999999999999999999]})"}) {
    RequestFacts f;
    EXPECT_EQ(parse(body, f), FactsStatus::kOk) << body;
    EXPECT_FALSE(routing::prefixKey(f)) << body;
  }
  RequestFacts f;
  EXPECT_EQ(parse(R"({"model":5,"prompt":"x"})", f), FactsStatus::kOk);
  EXPECT_FALSE(f.has_model);  // no model for the pool lookup, but the prompt still keys
  EXPECT_EQ(*routing::prefixKey(f), expected("", "", "x"));
  EXPECT_EQ(parse("[1,2]", f), FactsStatus::kNotObject);
  EXPECT_EQ(parse("\"hi\"", f), FactsStatus::kNotObject);
  std::string deep =
      "{\"model\":\"m\",\"x\":" + std::string(5000, '[') + std::string(5000, ']') + "}";
  EXPECT_EQ(parse(deep, f), FactsStatus::kOk);  // too deep to walk, but JSON
}

// Python's json (the engines' parser) accepts lone surrogate escapes; simdjson does not. Such a
// body is routed (without the unusable string) and the engine decides.
TEST(Facts, LoneSurrogatesAreNotInvalidJson) {
  RequestFacts f;
  EXPECT_EQ(parse(R"({"model":"m","prompt":"abc\ud83d"})", f), FactsStatus::kOk);
  EXPECT_EQ(f.model, "m");
  EXPECT_FALSE(routing::prefixKey(f));
  EXPECT_EQ(parse(R"({"model":"m","messages":[{"role":"user","content":"x\udc00"}]})", f),
            FactsStatus::kOk);
}

// Issue 28 review: pydantic's lax mode turns "100000" into 100000 for max_tokens and n, so the
// reservation must read it too; a UTF-8 byte order mark is JSON to Python's json.loads(bytes).
TEST(Facts, NumericStringsAndAByteOrderMark) {
  RequestFacts f;
  const uint32_t needs = routing::kNeedModel | routing::kNeedRequestShape;
  ASSERT_EQ(parse(R"({"model":"m","max_tokens":"100000","n":" 8 "})", f, needs), FactsStatus::kOk);
  EXPECT_EQ(f.max_tokens, 100000);
  EXPECT_EQ(f.n, 8);
  ASSERT_EQ(parse(R"({"model":"m","max_tokens":"1e5","n":"-2"})", f, needs), FactsStatus::kOk);
  EXPECT_FALSE(f.max_tokens);  // not what the gateway reads as an integer: no fact, and
  EXPECT_FALSE(f.n);
  EXPECT_TRUE(f.counts_unreadable);  // the reservation assumes the worst
  ASSERT_EQ(parse(R"({"max_tokens":"64.0","n":"2.","max_completion_tokens":null})", f, needs),
            FactsStatus::kOk);
  EXPECT_EQ(f.max_tokens, 64);
  EXPECT_EQ(f.n, 2);
  EXPECT_FALSE(f.counts_unreadable);
  // The last "stream" counts, read as pydantic's lax bool; anything else leaves it unknown.
  ASSERT_EQ(parse(R"({"stream":true,"stream":0})", f, needs), FactsStatus::kOk);
  EXPECT_EQ(f.stream, false);
  ASSERT_EQ(parse(R"({"stream":"True"})", f, needs), FactsStatus::kOk);
  EXPECT_EQ(f.stream, true);
  ASSERT_EQ(parse(R"({"stream":true,"stream":"maybe"})", f, needs), FactsStatus::kOk);
  EXPECT_FALSE(f.stream.has_value());
  // Each count's last member counts: a later null is the engine's default (not the 1 before).
  ASSERT_EQ(parse(R"({"max_tokens":1,"max_tokens":null,"max_completion_tokens":7})", f, needs),
            FactsStatus::kOk);
  EXPECT_EQ(f.max_tokens, 7);
  ASSERT_EQ(parse("\xEF\xBB\xBF{\"model\":\"bom\"}", f, needs), FactsStatus::kOk);
  EXPECT_EQ(f.model, "bom");
}

TEST(Facts, OverlongStringsAreNotFacts) {
  RequestFacts f;
  std::string big(kMaxFactString + 1, 'm');
  ASSERT_EQ(parse("{\"model\":\"" + big + "\",\"user\":\"" + big + "\",\"prompt\":\"x\"}", f),
            FactsStatus::kOk);
  EXPECT_FALSE(f.has_model);
  EXPECT_TRUE(f.model.empty());
  EXPECT_FALSE(f.user);
  EXPECT_TRUE(routing::prefixKey(f));  // the prompt still keys
  f.model.reserve(1 << 20);
  f.shrink(4096);
  EXPECT_LT(f.model.capacity(), 4096u);
}

TEST(Facts, InvalidJsonIsInvalid) {
  for (std::string_view body :
       {"", "not json", R"({"model":"a")", R"({"model":"m",)", R"({"model":"m"} x)",
        "{\"model\":\"\xff\xfe\"}", R"({"model":"m","prompt":"x)"}) {
    RequestFacts f;
    EXPECT_EQ(parse(body, f), FactsStatus::kInvalidJson) << body;
    EXPECT_FALSE(routing::prefixKey(f));
  }
  RequestFacts f;
  std::string deep = "{\"prompt\":" + std::string(50000, '[');
  EXPECT_EQ(parse(deep, f), FactsStatus::kInvalidJson);
}

TEST(Facts, NothingNeededBeyondTheModelIsNotExtracted) {
  RequestFacts f;
  ASSERT_EQ(parse(R"({"model":"m","prompt":"x","user":"u"})", f, routing::kNeedModel),
            FactsStatus::kOk);
  EXPECT_EQ(f.model, "m");
  EXPECT_FALSE(f.user);
  EXPECT_FALSE(f.has_prompt);
}

TEST(Facts, RequestShapeAndMessages) {
  RequestFacts f;
  ASSERT_EQ(parse(R"({"model":"m","stream":true,"stream_options":{"include_usage":true},)"
                  R"("max_completion_tokens":7,"lora_path":"ad1",)"
                  R"("messages":[{"role":"user","content":"hi"}]})",
                  f,
                  routing::kNeedModel | routing::kNeedRequestShape | routing::kNeedMessages |
                      routing::kNeedPromptPrefix),
            FactsStatus::kOk);
  EXPECT_EQ(f.stream, true);
  EXPECT_TRUE(f.include_usage);
  EXPECT_EQ(f.max_tokens, 7);
  EXPECT_EQ(f.lora_adapter, "ad1");
  ASSERT_TRUE(f.chat);
  EXPECT_EQ(f.chat->dump(), R"({"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(f.prompt_prefix, "user\x1fhi\x1e");  // rendered from the chat input
}

// What the quota stage reserves by: the larger of max_tokens and max_completion_tokens, integral
// floats accepted, n, the raw stream_options (include_usage false or absent, other members kept).
TEST(Facts, QuotaShapeFacts) {
  RequestFacts f;
  ASSERT_EQ(parse(R"({"max_tokens":1e3,"max_completion_tokens":20,"n":3,)"
                  R"("stream_options":{"continuous_usage_stats":true,"include_usage":false}})",
                  f, routing::kNeedRequestShape),
            FactsStatus::kOk);
  EXPECT_EQ(f.max_tokens, 1000);
  EXPECT_EQ(f.n, 3);
  EXPECT_TRUE(f.has_stream_options);
  EXPECT_FALSE(f.include_usage);
  EXPECT_EQ(f.stream_options_json, R"({"continuous_usage_stats":true,"include_usage":false})");
  RequestFacts g;
  ASSERT_EQ(parse(R"({"max_tokens":2.5,"max_completion_tokens":-4,"n":"2","prompt":[1,2,3]})", g,
                  routing::kNeedRequestShape | routing::kNeedPromptPrefix),
            FactsStatus::kOk);
  EXPECT_FALSE(g.max_tokens);  // not whole numbers: no fact (the default applies)
  EXPECT_EQ(g.n, 2);           // a digit string: pydantic's lax mode reads it (the engines do)
  EXPECT_EQ(g.prompt_id_count, 3u);
  // The Responses API's max_output_tokens counts as well.
  RequestFacts h;
  ASSERT_EQ(parse(R"({"input":"hi","max_output_tokens":300,"max_tokens":12})", h,
                  routing::kNeedRequestShape),
            FactsStatus::kOk);
  EXPECT_EQ(h.max_tokens, 300);
}

TEST(Facts, PromptTextAndTokenIdsWhenNeeded) {
  RequestFacts f;
  ASSERT_EQ(parse(R"({"prompt":[5,6,7]})", f, routing::kNeedPromptText), FactsStatus::kOk);
  EXPECT_EQ(f.prompt_token_ids, (std::vector<int64_t>{5, 6, 7}));
  ASSERT_EQ(parse(R"({"prompt":"abc\ndef"})", f, routing::kNeedPromptText), FactsStatus::kOk);
  EXPECT_EQ(f.prompt_text, "abc\ndef");
}

// Tier 1.5 asks for token ids only: a text prompt is not copied, and a repeated "prompt" key
// keeps the last one (as the engine reads it).
TEST(Facts, TokenIdsOnlyWhenThatIsAllThatIsNeeded) {
  RequestFacts f;
  ASSERT_EQ(parse(R"({"prompt":[5,6,7]})", f, routing::kNeedPromptTokenIds), FactsStatus::kOk);
  EXPECT_EQ(f.prompt_token_ids, (std::vector<int64_t>{5, 6, 7}));
  ASSERT_EQ(parse(R"({"prompt":"abc"})", f, routing::kNeedPromptTokenIds), FactsStatus::kOk);
  EXPECT_TRUE(f.prompt_text.empty());
  EXPECT_TRUE(f.prompt_token_ids.empty());
  ASSERT_EQ(parse(R"({"prompt":[1,2],"prompt":[9]})", f, routing::kNeedPromptTokenIds),
            FactsStatus::kOk);
  EXPECT_EQ(f.prompt_token_ids, (std::vector<int64_t>{9}));
}

// Tier 1.5's chat rendering needs the template members besides "messages": converted with them.
TEST(Facts, ChatTemplateFieldsAreConverted) {
  RequestFacts f;
  const uint32_t needs = routing::kNeedModel | routing::kNeedMessages | routing::kNeedChatInput;
  ASSERT_EQ(
      parse(R"({"model":"m","tools":[{"type":"function","function":{"name":"f"}}],)"
            R"("messages":[{"role":"user","content":"hi"}],"temperature":0.5,)"
            R"("add_generation_prompt" : false ,"documents":null,"add_special_tokens":true,)"
            R"("chat_template_kwargs":{"enable_thinking":false},"continue_final_message":"x"})",
            f, needs),
      FactsStatus::kOk);
  // Members in body order, other members left out; the wrong-typed continue_final_message is
  // kept (the template input check reports it).
  ASSERT_TRUE(f.chat);
  EXPECT_EQ(f.chat->dump(),
            R"({"tools":[{"type":"function","function":{"name":"f"}}],)"
            R"("messages":[{"role":"user","content":"hi"}],)"
            R"("add_generation_prompt":false,"documents":null,"add_special_tokens":true,)"
            R"("chat_template_kwargs":{"enable_thinking":false},"continue_final_message":"x"})");
  EXPECT_EQ(f.add_special_tokens, std::optional<bool>(true));
  // Without the need nothing is converted.
  RequestFacts g;
  ASSERT_EQ(parse(R"({"model":"m","add_special_tokens":false,"tools":[]})", g, routing::kNeedModel),
            FactsStatus::kOk);
  EXPECT_FALSE(g.chat);
  EXPECT_FALSE(g.add_special_tokens.has_value());
  // A completions request's add_special_tokens (no messages: no chat input); a non-boolean one
  // is not a fact.
  ASSERT_EQ(parse(R"({"prompt":"x","add_special_tokens":false})", g, needs), FactsStatus::kOk);
  EXPECT_EQ(g.add_special_tokens, std::optional<bool>(false));
  EXPECT_FALSE(g.chat);
  ASSERT_EQ(parse(R"({"prompt":"x","add_special_tokens":1})", g, needs), FactsStatus::kOk);
  EXPECT_FALSE(g.add_special_tokens.has_value());
  ASSERT_EQ(
      parse(R"({"prompt":"x","add_special_tokens":true,"add_special_tokens":null})", g, needs),
      FactsStatus::kOk);
  EXPECT_FALSE(g.add_special_tokens.has_value());  // the last member counts
}

// The chat input is converted in the one walk of the body. What simdjson stops on inside those
// members (not JSON, or JSON to Python only: NaN, Infinity) is read as before the conversion:
// the members skipped, no chat input and no prompt, status kOk, and the engine judges the body.
// What is JSON but cannot be rendered as the engine would (an integer past 64 bits, which Python
// keeps exact and a DOM of doubles would not; 1e400; a lone surrogate escape; nesting past the
// bound) leaves no chat input either. Either way the walk goes on: a model after it is read.
TEST(Facts, ChatInputIsJsonOrAbsent) {
  RequestFacts f;
  const uint32_t needs = routing::kNeedModel | routing::kNeedMessages | routing::kNeedChatInput |
                         routing::kNeedPromptPrefix | routing::kNeedPromptText;
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  for (const std::string& body :
       {std::string(R"({"messages":[{"role":"user","content":"hi"},],"model":"m"})"),
        std::string(R"({"messages":[],"add_generation_prompt":tru,"model":"m"})"),
        std::string(R"({"messages":[],"tools":[{"a":}],"model":"m"})"),
        std::string(R"({"messages":[{"role":"user","content":"hi"} {"role":"user"}],"model":"m"})"),
        std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function",)"
                    R"("function":{"name":"f","parameters":{"maximum":Infinity}}}],"model":"m"})"),
        std::string(R"({"messages":[{"role":"user","content":NaN}],"prompt":"p","model":"m"})"),
        std::string(R"({"messages":[],"tools":[{"maximum":99999999999999999999}],"model":"m"})"),
        std::string(R"({"messages":[],"tools":[{"maximum":1e400}],"model":"m"})"),
        R"({"messages":[],"tools":[{"maximum":)" + std::string(400, '9') + R"(}],"model":"m"})",
        std::string(R"({"messages":[{"role":"user","content":"x\udc00"}],"model":"m"})"),
        std::string(R"({"messages":[{"role":"user","\udc00":1,"content":"hi"}],"model":"m"})"),
        R"({"messages":[{"role":"user","content":)" + deep + R"(}],"model":"m"})",
        R"({"tools":)" + deep + R"(,"messages":[],"model":"m"})"}) {
    EXPECT_EQ(parse(body, f, needs), FactsStatus::kOk) << body;
    EXPECT_FALSE(f.chat) << body;
    EXPECT_FALSE(f.chat_too_large) << body;
    EXPECT_FALSE(f.has_prompt) << body;
    EXPECT_TRUE(f.prompt_text.empty()) << body;
    EXPECT_EQ(f.model, "m") << body;
  }
  EXPECT_EQ(parse(R"({"messages":[],"tools":[{"a":1,"b":-1,"c":1.5e3,"d":18446744073709551615}]})",
                  f, needs),
            FactsStatus::kOk);
  ASSERT_TRUE(f.chat);
  EXPECT_EQ(f.chat->dump(),
            R"({"messages":[],"tools":[{"a":1,"b":-1,"c":1500.0,"d":18446744073709551615}]})");
  // A repeated "messages": the last one counts, as in Python's json.
  ASSERT_EQ(parse(R"({"messages":[{"role":"user","content":"a"}],"messages":"x"})", f, needs),
            FactsStatus::kOk);
  EXPECT_FALSE(f.chat);
  EXPECT_FALSE(f.has_prompt);
  ASSERT_EQ(parse(R"({"messages":"x","messages":[{"role":"user","content":"b"}]})", f, needs),
            FactsStatus::kOk);
  ASSERT_TRUE(f.chat);
  EXPECT_EQ(f.chat->dump(), R"({"messages":[{"role":"user","content":"b"}]})");
  // The request's chat input is not kept once it ended (RequestCtx::end shrinks its facts).
  f.shrink(1 << 20);
  EXPECT_FALSE(f.chat);
}

// An object with thousands of distinct keys (and repeated ones) is converted as nlohmann's parser
// reads it: first place, last value; its keys are looked up through an index, not one scan per
// key (the DOM is built before credentials are checked).
TEST(Facts, ChatInputWithManyKeys) {
  std::string obj = "{";
  for (int i = 0; i < 20000; ++i)
    obj += (i ? ",\"k" : "\"k") + std::to_string(i % 15000) + "\":" + std::to_string(i);
  obj += "}";
  const std::string body = R"({"messages":[{"role":"user","content":"x"}],"tools":[)" + obj + "]}";
  RequestFacts f;
  ASSERT_EQ(parseFacts(body.data(), body.size(), 0,
                       routing::kNeedMessages | routing::kNeedChatInput, 1024, f, 1 << 20),
            FactsStatus::kOk);
  ASSERT_TRUE(f.chat);
  const auto want = nlohmann::ordered_json::parse(body);
  EXPECT_EQ((*f.chat)["tools"].dump(), want["tools"].dump());
  EXPECT_EQ((*f.chat)["tools"][0].size(), 15000u);
  EXPECT_EQ((*f.chat)["tools"][0]["k0"], 15000);  // the later value, in the first place
}

// The chat input has a bound (the data plane passes twice the tokenizer's text bound): past it
// nothing is converted (chat_too_large: the tokenizer's too_large miss), and the prompt prefix
// (Tier 1 keys, the quota's estimate) still comes from the messages.
TEST(Facts, ChatInputBound) {
  const std::string content(300, 'c');
  const std::string body =
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":")" + content +
      R"("}],"model":"m"})";
  const uint32_t needs = routing::kNeedModel | routing::kNeedMessages | routing::kNeedChatInput |
                         routing::kNeedPromptPrefix;
  RequestFacts big, small;
  ASSERT_EQ(parseFacts(body.data(), body.size(), 0, needs, 1024, big, 4096), FactsStatus::kOk);
  ASSERT_EQ(parseFacts(body.data(), body.size(), 0, needs, 1024, small, 200), FactsStatus::kOk);
  ASSERT_TRUE(big.chat);
  EXPECT_FALSE(big.chat_too_large);
  EXPECT_FALSE(small.chat);
  EXPECT_TRUE(small.chat_too_large);
  EXPECT_EQ(small.model, "m");
  const std::string want = "system\x1fs\x1euser\x1f" + content + "\x1e";  // by hand
  for (const RequestFacts* f : {&big, &small}) {
    EXPECT_TRUE(f->has_prompt);
    EXPECT_EQ(f->prompt_prefix, want);
    EXPECT_EQ(f->prompt_render_total, want.size());
  }
  // A repeated "messages" past the bound: the last one is rendered.
  const std::string twice = R"({"messages":[{"role":"user","content":")" + content +
                            R"("}],"messages":[{"role":"user","content":"z"}]})";
  RequestFacts t;
  ASSERT_EQ(parseFacts(twice.data(), twice.size(), 0, needs, 1024, t, 200), FactsStatus::kOk);
  EXPECT_TRUE(t.chat_too_large);
  EXPECT_EQ(t.prompt_prefix, "user\x1fz\x1e");
  // A completions request with a large template member is not a chat past the bound; its
  // add_special_tokens is read past the bound too.
  const std::string completions =
      R"({"prompt":"p","documents":")" + content + R"(","add_special_tokens":false,"model":"m"})";
  RequestFacts c;
  ASSERT_EQ(parseFacts(completions.data(), completions.size(), 0, needs | routing::kNeedPromptText,
                       1024, c, 200),
            FactsStatus::kOk);
  EXPECT_FALSE(c.chat);
  EXPECT_FALSE(c.chat_too_large);
  EXPECT_TRUE(c.has_prompt);
  EXPECT_EQ(c.prompt_text, "p");
  EXPECT_EQ(c.add_special_tokens, std::optional<bool>(false));
}

// The chat input is the DOM nlohmann's own parser gives for those members (the reference), over
// random chat bodies.
TEST(Facts, ChatInputEqualsNlohmannsParse) {
  std::mt19937 rng(29);
  const std::vector<std::string> strings = {"hi",         R"(caf\u00e9)",    R"(\"q\")",
                                            R"(t\there)", R"(\ud83d\ude00)", ""};
  const std::vector<std::string> scalars = {"0",
                                            "-0",
                                            "1.5",
                                            "1e3",
                                            "-7",
                                            "18446744073709551615",
                                            "true",
                                            "false",
                                            "null",
                                            "9223372036854775807",
                                            "-9223372036854775808",
                                            "2.5E-3"};
  auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  std::function<std::string(int)> value = [&](int depth) -> std::string {
    switch (depth > 3 ? rng() % 2 : rng() % 4) {
      case 0:
        return "\"" + pick(strings) + "\"";
      case 1:
        return pick(scalars);
      case 2: {
        std::string a = "[";
        for (unsigned i = 0, n = rng() % 4; i < n; ++i) a += (i ? "," : "") + value(depth + 1);
        return a + "]";
      }
      default: {
        std::string o = "{";
        for (unsigned i = 0, n = rng() % 4; i < n; ++i)
          o += std::string(i ? "," : "") + "\"k" + std::to_string(rng() % 3) +
               "\" : " + value(depth + 1);
        return o + "}";
      }
    }
  };
  const uint32_t needs = routing::kNeedModel | routing::kNeedMessages | routing::kNeedChatInput;
  const std::vector<std::string> members = {
      "messages",   "tools", "documents", "chat_template_kwargs", "add_generation_prompt",
      "temperature"};
  for (int round = 0; round < 300; ++round) {
    std::string body = "{";
    for (unsigned i = 0, n = 1 + rng() % 5; i < n; ++i) {
      const std::string key = pick(members);
      const std::string v = key == "messages" ? "[" + value(1) + ", " + value(1) + "]" : value(1);
      body += std::string(i ? "," : "") + "\"" + key + "\":" + v;
    }
    body += R"(,"messages":[{"role":"user","content":"x"}]})";
    const nlohmann::ordered_json all = nlohmann::ordered_json::parse(body);
    nlohmann::ordered_json want = nlohmann::ordered_json::object();
    for (const auto& [k, v] : all.items())
      if (k != "temperature") want[k] = v;
    RequestFacts f;
    ASSERT_EQ(parse(body, f, needs), FactsStatus::kOk) << body;
    ASSERT_TRUE(f.chat) << body;
    EXPECT_EQ(f.chat->dump(), want.dump()) << body;
    EXPECT_TRUE(testing::sameTyped(*f.chat, want)) << body;
  }
}

// Bug 5 of issue 9: a huge body does not leave the worker's parser holding ~6x its size.
TEST(Facts, ParserShrinksAfterAHugeBody) {
  std::string body = "{\"model\":\"m\",\"prompt\":\"" + std::string(8 << 20, 'x') + "\"}";
  body.reserve(body.size() + kFactsPadding);
  RequestFacts f;
  ASSERT_EQ(parseFacts(body.data(), body.size(), body.capacity(), kKeyNeeds, 1024, f),
            FactsStatus::kOk);
  EXPECT_TRUE(routing::prefixKey(f));
  EXPECT_LE(factsParserCapacity(), kKeepParserBytes);
}

}  // namespace
}  // namespace kvgate::proxy
