// The gateway's /tokenize and /detokenize answers (tokenize_local.h): what it forwards, what it
// learns from an engine's answer, and when it answers itself. The tokenizer is a tiny
// hand-written one, so every expected id and text is worked out by hand.
#include "proxy/tokenize_local.h"

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace kvgate::proxy {
namespace {

using J = nlohmann::ordered_json;

// Characters a..e are ids 0..4, "ab" is 5 (one merge), " " is 6; "<s>" special (7); the
// decoder joins the pieces; clean-up applies when asked.
std::shared_ptr<const tok::Tokenizer> tiny() {
  nlohmann::json vocab = {{"a", 0}, {"b", 1},  {"c", 2}, {"d", 3},
                          {"e", 4}, {"ab", 5}, {" ", 6}, {".", 8}};
  nlohmann::json tj = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}}},
      {"added_tokens", {{{"id", 7}, {"content", "<s>"}, {"special", true}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {7}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder", {{"type", "Fuse"}}}};
  auto t =
      tok::Tokenizer::fromStrings(tj.dump(), R"({"clean_up_tokenization_spaces": true})", "tiny");
  EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().what);
  return t ? *t : nullptr;
}

std::optional<TokenizeAnswer> build(TokenizeDialect d, TokenizeOp op, const char* body,
                                    const char** why) {
  static auto t = tiny();
  return buildTokenizeAnswer(d, op, J::parse(body), *t, 1024, why);
}

TEST(TokenizeLocal, VllmTokenizeAnswerIsLearnedThenGiven) {
  const char* why;
  auto a =
      build(TokenizeDialect::kVllm, TokenizeOp::kTokenize, R"({"model":"m","prompt":"abc"})", &why);
  ASSERT_TRUE(a) << why;
  TokenizeMirror mirror;
  std::string body;
  EXPECT_EQ(mirror.decide(*a, 0, &body), TokenizeMirror::Use::kCheck);
  // The engine's answer: <s> ab c, and its context length.
  EXPECT_TRUE(
      mirror.check(*a, R"({"count":3,"max_model_len":4096,"tokens":[7,5,2],"token_strs":null})"));
  ASSERT_EQ(mirror.decide(*a, 0, &body), TokenizeMirror::Use::kAnswer);
  EXPECT_EQ(body, R"({"count":3,"max_model_len":4096,"tokens":[7,5,2],"token_strs":null})");
  // Token strings and no special tokens.
  a = build(TokenizeDialect::kVllm, TokenizeOp::kTokenize,
            R"({"model":"m","prompt":"abd","add_special_tokens":false,"return_token_strs":true})",
            &why);
  ASSERT_TRUE(a);
  // (a form of its own: the engine's answer first)
  EXPECT_EQ(mirror.decide(*a, 0, &body), TokenizeMirror::Use::kCheck);
  EXPECT_TRUE(mirror.check(
      *a, R"({"count":2,"max_model_len":4096,"tokens":[5,3],"token_strs":["ab","d"]})"));
  ASSERT_EQ(mirror.decide(*a, 0, &body), TokenizeMirror::Use::kAnswer);
  EXPECT_EQ(body, R"({"count":2,"max_model_len":4096,"tokens":[5,3],"token_strs":["ab","d"]})");
  // Every second one checked.
  int checks = 0;
  for (int i = 0; i < 10; ++i) checks += mirror.decide(*a, 2, &body) == TokenizeMirror::Use::kCheck;
  EXPECT_EQ(checks, 5);
}

TEST(TokenizeLocal, AMismatchStopsTheModelForGood) {
  const char* why;
  auto a =
      build(TokenizeDialect::kVllm, TokenizeOp::kTokenize, R"({"model":"m","prompt":"abc"})", &why);
  TokenizeMirror mirror;
  std::string body;
  EXPECT_FALSE(
      mirror.check(*a, R"({"count":3,"max_model_len":4096,"tokens":[7,0,1],"token_strs":null})"));
  EXPECT_EQ(mirror.decide(*a, 0, &body), TokenizeMirror::Use::kForward);
  // A later matching answer does not undo it; neither do malformed or partial answers match.
  EXPECT_FALSE(
      mirror.check(*a, R"({"count":3,"max_model_len":4096,"tokens":[7,5,2],"token_strs":null})"));
  EXPECT_EQ(mirror.decide(*a, 0, &body), TokenizeMirror::Use::kForward);
  EXPECT_TRUE(mirror.blocked(a->key));
  for (const char* bad :
       {"", "not json", "[]", R"({"count":3,"tokens":[7,5,2],"token_strs":null})",
        R"({"count":3,"max_model_len":"4096","tokens":[7,5,2],"token_strs":null})",
        R"({"count":3,"max_model_len":4096,"tokens":[7,5,2]})",
        R"({"count":3,"max_model_len":4096,"tokens":[7,5,2],"token_strs":null,"x":1})"}) {
    TokenizeMirror m;
    EXPECT_FALSE(m.check(*a, bad)) << bad;
    EXPECT_EQ(m.decide(*a, 0, &body), TokenizeMirror::Use::kForward) << bad;
  }
  // Another model on the same mirror is not affected.
  auto b =
      build(TokenizeDialect::kVllm, TokenizeOp::kTokenize, R"({"model":"n","prompt":"abc"})", &why);
  EXPECT_EQ(mirror.decide(*b, 0, &body), TokenizeMirror::Use::kCheck);
  EXPECT_FALSE(mirror.blocked(b->key));
  // An engine refusing what the gateway would answer (a 404 for a model it does not serve).
  mirror.refused(*b);
  EXPECT_EQ(mirror.decide(*b, 0, &body), TokenizeMirror::Use::kForward);
}

TEST(TokenizeLocal, EachFormIsLearnedOnItsOwn) {
  static auto t = tiny();
  const char* why;
  auto key = [&](TokenizeDialect d, TokenizeOp op, const char* body, std::string_view auth = {}) {
    auto r = readTokenizeRequest(d, op, J::parse(body), auth, &why);
    return r ? r->key : std::string("none");
  };
  const auto V = TokenizeDialect::kVllm;
  const auto T = TokenizeOp::kTokenize;
  const std::string plain = key(V, T, R"({"model":"m","prompt":"a"})");
  EXPECT_EQ(plain, key(V, T, R"({"model":"m","prompt":"other text","add_special_tokens":true})"));
  // Each of these can answer differently on an engine whose other forms matched.
  for (const std::string& other :
       {key(V, T, R"({"model":"m","prompt":"a","add_special_tokens":false})"),
        key(V, T, R"({"model":"m","prompt":"a","return_token_strs":true})"),
        key(V, T, R"({"model":"m","messages":[{"role":"user","content":"a"}]})"),
        key(TokenizeDialect::kSglang, T, R"({"model":"m","prompt":"a"})"),
        key(V, TokenizeOp::kDetokenize, R"({"model":"m","tokens":[1]})"),
        key(V, T, R"({"model":"m2","prompt":"a"})"),
        key(V, T, R"({"model":"m","prompt":"a"})", "Bearer k1\n")})
    EXPECT_NE(other, plain);
  // A match of the prompt form answers nothing of another form.
  TokenizeMirror mirror;
  auto p = buildTokenizeAnswer(V, T, J::parse(R"({"model":"m","prompt":"abc"})"), *t, 1024, &why);
  ASSERT_TRUE(
      mirror.check(*p, R"({"count":3,"max_model_len":9,"tokens":[7,5,2],"token_strs":null})"));
  auto q = buildTokenizeAnswer(
      V, T, J::parse(R"({"model":"m","prompt":"abc","add_special_tokens":false})"), *t, 1024, &why);
  std::string body;
  EXPECT_EQ(mirror.decide(*q, 0, &body), TokenizeMirror::Use::kCheck);
  // The paths each engine serves.
  EXPECT_TRUE(tokenizePathServed(V, "/tokenize"));
  EXPECT_TRUE(tokenizePathServed(V, "/detokenize"));
  EXPECT_FALSE(tokenizePathServed(V, "/v1/tokenize"));
  EXPECT_FALSE(tokenizePathServed(V, "/llama/tokenize"));
  EXPECT_TRUE(tokenizePathServed(TokenizeDialect::kSglang, "/v1/detokenize"));
  EXPECT_FALSE(tokenizePathServed(TokenizeDialect::kOff, "/tokenize"));
  EXPECT_TRUE(tokenizeRefusal(404));
  EXPECT_FALSE(tokenizeRefusal(429));
  EXPECT_FALSE(tokenizeRefusal(503));
}

TEST(TokenizeLocal, DetokenizeLearnsTheCleanUp) {
  const char* why;
  // "ab" " " "." -> "ab ." raw, "ab." cleaned up.
  auto a = build(TokenizeDialect::kVllm, TokenizeOp::kDetokenize,
                 R"({"model":"m","tokens":[7,5,6,8]})", &why);
  ASSERT_TRUE(a) << why;
  EXPECT_EQ(a->text, "<s>ab .");
  EXPECT_EQ(a->text_clean, "<s>ab.");
  TokenizeMirror mirror;
  std::string body;
  // An answer that does not tell the two apart leaves the clean-up unknown: a later text that
  // differs is checked, one that does not is answered.
  auto same = build(TokenizeDialect::kVllm, TokenizeOp::kDetokenize,
                    R"({"model":"m","tokens":[0,1]})", &why);
  EXPECT_TRUE(mirror.check(*same, R"({"prompt":"ab"})"));
  EXPECT_EQ(mirror.decide(*same, 0, &body), TokenizeMirror::Use::kAnswer);
  EXPECT_EQ(body, R"({"prompt":"ab"})");
  EXPECT_EQ(mirror.decide(*a, 0, &body), TokenizeMirror::Use::kCheck);
  // This engine does not clean up (transformers >= 5.7).
  EXPECT_TRUE(mirror.check(*a, R"({"prompt":"<s>ab ."})"));
  ASSERT_EQ(mirror.decide(*a, 0, &body), TokenizeMirror::Use::kAnswer);
  EXPECT_EQ(body, R"({"prompt":"<s>ab ."})");
  // An engine that then cleans one up: not one rule, so the model stops.
  EXPECT_FALSE(mirror.check(*a, R"({"prompt":"<s>ab."})"));
  EXPECT_EQ(mirror.decide(*same, 0, &body), TokenizeMirror::Use::kForward);
  // SGLang: {"text"}, special tokens skipped by default.
  auto s = build(TokenizeDialect::kSglang, TokenizeOp::kDetokenize,
                 R"({"model":"m","tokens":[7,5,6,8]})", &why);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->text, "ab .");
  TokenizeMirror sg;
  EXPECT_FALSE(sg.check(*s, R"({"prompt":"ab ."})"));  // (vLLM's member: not SGLang's answer)
  TokenizeMirror sg2;
  EXPECT_TRUE(sg2.check(*s, R"({"text":"ab ."})"));
  ASSERT_EQ(sg2.decide(*s, 0, &body), TokenizeMirror::Use::kAnswer);
  EXPECT_EQ(body, R"({"text":"ab ."})");
}

TEST(TokenizeLocal, WhatTheGatewayForwards) {
  const char* why = "";
  auto none = [&](TokenizeDialect d, TokenizeOp op, const char* body) {
    return !build(d, op, body, &why).has_value();
  };
  const auto V = TokenizeDialect::kVllm, S = TokenizeDialect::kSglang;
  const auto T = TokenizeOp::kTokenize, D = TokenizeOp::kDetokenize;
  EXPECT_TRUE(none(TokenizeDialect::kOff, T, R"({"model":"m","prompt":"a"})"));
  EXPECT_TRUE(none(V, T, R"({"prompt":"a"})"));  // no model
  EXPECT_TRUE(none(V, T, R"({"model":7,"prompt":"a"})"));
  EXPECT_TRUE(none(V, T, R"({"model":"m"})"));                             // neither form
  EXPECT_TRUE(none(V, T, R"({"model":"m","prompt":"a","messages":[]})"));  // both
  EXPECT_TRUE(none(V, T, R"({"model":"m","prompt":["a"]})"));
  EXPECT_TRUE(none(V, T, R"({"model":"m","prompt":"a","add_special_tokens":null})"));
  EXPECT_TRUE(none(V, T, R"({"model":"m","prompt":"a","return_token_strs":"yes"})"));
  EXPECT_TRUE(none(S, T, R"({"model":"m","messages":[{"role":"user","content":"a"}]})"));
  EXPECT_TRUE(none(
      V, T, R"({"model":"m","messages":[{"role":"user","content":"a"}],"chat_template":"x"})"));
  EXPECT_TRUE(none(
      V, T,
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})"));
  EXPECT_TRUE(
      none(V, T, R"({"model":"m","messages":[{"role":"user","content":"a"}]})"));  // no template
  EXPECT_TRUE(none(
      V, T, (std::string(R"({"model":"m","prompt":")") + std::string(2000, 'a') + "\"}").c_str()));
  EXPECT_STREQ(why, "too_large");
  EXPECT_TRUE(none(V, D, R"({"model":"m","tokens":[-1]})"));
  EXPECT_TRUE(none(V, D, R"({"model":"m","tokens":[4294967296]})"));
  EXPECT_TRUE(none(V, D, R"({"model":"m","tokens":[1.0]})"));
  EXPECT_TRUE(none(V, D, R"({"model":"m","tokens":[[1]]})"));
  EXPECT_TRUE(none(V, D, R"({"model":"m","tokens":"1"})"));
  std::string many = R"({"model":"m","tokens":[0)";
  for (size_t i = 0; i < kMaxDetokenizeIds; ++i) many += ",0";
  EXPECT_TRUE(none(V, D, (many + "]}").c_str()));
  EXPECT_STREQ(why, "too_large");
  EXPECT_TRUE(none(S, D, R"({"model":"m","tokens":[1],"skip_special_tokens":1})"));
  EXPECT_TRUE(none(V, T, R"([1,2])"));
  // Accepted: an id past the vocabulary (dropped, as the engines do), unknown members ignored.
  EXPECT_FALSE(none(V, D, R"({"model":"m","tokens":[4294967295,0],"extra":{"deep":[1]}})"));
  EXPECT_FALSE(none(S, T, R"({"model":"m","prompt":"a","add_special_tokens":false})"));
}

TEST(TokenizeLocal, ChatInputsVllmValidatesOrRendersDifferentlyAreForwarded) {
  const char* why = "";
  auto read = [&](const char* body) {
    return readTokenizeRequest(TokenizeDialect::kVllm, TokenizeOp::kTokenize, J::parse(body), {},
                               &why)
        .has_value();
  };
  EXPECT_TRUE(read(R"({"model":"m","messages":[{"role":"user","content":"a","name":"x"}],
                      "chat_template_kwargs":{"enable_thinking":false}})"));
  EXPECT_TRUE(
      read(R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]})"));
  for (
      const char* body : {
          R"({"model":"m","messages":[{"role":"user","content":"a"}],"add_generation_prompt":null})",
          R"({"model":"m","messages":[{"role":"user","content":"a"}],"continue_final_message":null})",
          R"({"model":"m","messages":[{"role":"user","content":"a"}],"add_generation_prompt":true,"continue_final_message":true})",
          R"({"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}]})",
          R"({"model":"m","messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"budget":1.0}})",
          R"({"model":"m","messages":[{"role":"user","content":"a","name":5}]})",
          R"({"model":"m","messages":[{"content":"a"}]})",
          R"({"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[]}]})",
          R"({"model":"m","messages":[{"role":"tool","content":"1","tool_call_id":"c"}]})",
          R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","x":1}]}]})",
      })
    EXPECT_FALSE(read(body)) << body;
}

TEST(TokenizeLocal, FormsAreForgottenLeastRecentFirstAndOnlyIntegersAreLearned) {
  static auto t = tiny();
  const char* why;
  auto form = [&](int i) {
    return *buildTokenizeAnswer(
        TokenizeDialect::kVllm, TokenizeOp::kTokenize,
        J::parse(R"({"model":"m)" + std::to_string(i) + R"(","prompt":"a"})"), *t, 1024, &why);
  };
  TokenizeMirror mirror;
  const auto first = form(0);
  mirror.refused(first);
  EXPECT_TRUE(mirror.blocked(first.key));
  for (size_t i = 1; i <= TokenizeMirror::kMaxModels; ++i) mirror.refused(form(int(i)));
  EXPECT_FALSE(mirror.blocked(first.key));  // (forgotten: checked again)
  EXPECT_TRUE(mirror.blocked(form(int(TokenizeMirror::kMaxModels)).key));
  // A max_model_len of 1e30 (SGLang's model_max_length when unset) is not reproducible.
  TokenizeMirror m2;
  const auto a = form(1);
  EXPECT_FALSE(m2.check(a, R"({"count":2,"max_model_len":1e30,"tokens":[7,0],"token_strs":null})"));
  EXPECT_FALSE(
      m2.check(a, R"({"count":2,"max_model_len":4096.0,"tokens":[7,0],"token_strs":null})"));
  TokenizeMirror m3;
  EXPECT_TRUE(m3.check(a, R"({"count":2,"max_model_len":4096,"tokens":[7,0],"token_strs":null})"));
}

}  // namespace
}  // namespace kvgate::proxy
