// RequestFacts parsing and the prefix key. Expected keys are computed here by hand from the
// documented rendering (XXH3 over model NUL salt NUL rendered), not by the code under test.
#include "proxy/facts_parser.h"

#include <gtest/gtest.h>
#include <xxhash.h>

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

TEST(Facts, RequestShapeAndRawMessages) {
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
  EXPECT_EQ(f.messages_json, R"([{"role":"user","content":"hi"}])");
  EXPECT_EQ(f.prompt_prefix, "user\x1fhi\x1e");  // rendered from the raw copy
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

// Tier 1.5's chat rendering needs the template members besides "messages": captured raw.
TEST(Facts, ChatTemplateFieldsAreCapturedRaw) {
  RequestFacts f;
  const uint32_t needs = routing::kNeedModel | routing::kNeedMessages | routing::kNeedChatInput;
  ASSERT_EQ(
      parse(R"({"model":"m","tools":[{"type":"function","function":{"name":"f"}}],)"
            R"("messages":[{"role":"user","content":"hi"}],"temperature":0.5,)"
            R"("add_generation_prompt" : false ,"documents":null,"add_special_tokens":true,)"
            R"("chat_template_kwargs":{"enable_thinking":false},"continue_final_message":"x"})",
            f, needs),
      FactsStatus::kOk);
  EXPECT_EQ(f.messages_json, R"([{"role":"user","content":"hi"}])");
  // Members in body order, whitespace after a value trimmed, other members left out; the
  // wrong-typed continue_final_message is kept (the template input check reports it).
  EXPECT_EQ(f.chat_extras_json,
            R"("tools":[{"type":"function","function":{"name":"f"}}],)"
            R"("add_generation_prompt":false,"documents":null,"add_special_tokens":true,)"
            R"("chat_template_kwargs":{"enable_thinking":false},"continue_final_message":"x")");
  EXPECT_EQ(f.add_special_tokens, std::optional<bool>(true));
  // Without the need nothing is captured.
  RequestFacts g;
  ASSERT_EQ(parse(R"({"model":"m","add_special_tokens":false,"tools":[]})", g, routing::kNeedModel),
            FactsStatus::kOk);
  EXPECT_TRUE(g.chat_extras_json.empty());
  EXPECT_FALSE(g.add_special_tokens.has_value());
  // A completions request's add_special_tokens; a non-boolean one is not a fact.
  ASSERT_EQ(parse(R"({"prompt":"x","add_special_tokens":false})", g, needs), FactsStatus::kOk);
  EXPECT_EQ(g.add_special_tokens, std::optional<bool>(false));
  ASSERT_EQ(parse(R"({"prompt":"x","add_special_tokens":1})", g, needs), FactsStatus::kOk);
  EXPECT_FALSE(g.add_special_tokens.has_value());
  EXPECT_EQ(g.chat_extras_json, R"("add_special_tokens":1)");
}

// Raw-captured members are validated: when "messages" or a chat-template member is not valid
// JSON (or holds what simdjson refuses, like an integer past 2^64), the captures are dropped (no
// Tier 1.5 key) and the body goes to the engine, which judges it.
TEST(Facts, RawCapturesAreValidated) {
  RequestFacts f;
  const uint32_t needs = routing::kNeedModel | routing::kNeedMessages | routing::kNeedChatInput;
  for (const char* body :
       {R"({"messages":[{"role":"user","content":"hi"},]})",
        R"({"messages":[],"add_generation_prompt":tru})", R"({"messages":[],"tools":[{"a":}]})",
        R"({"messages":[],"tools":[{"maximum":99999999999999999999}]})"}) {
    EXPECT_EQ(parse(body, f, needs), FactsStatus::kOk) << body;
    EXPECT_TRUE(f.messages_json.empty() && f.chat_extras_json.empty()) << body;
    EXPECT_EQ(f.model, "");
  }
  EXPECT_EQ(parse(R"({"messages":[],"tools":[{"a":1}]})", f, needs), FactsStatus::kOk);
  EXPECT_EQ(f.messages_json, "[]");
  EXPECT_EQ(f.chat_extras_json, R"("tools":[{"a":1}])");
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
