// P/D leg bodies against hand-written expectations from shared/reference/engines.md §3.3, §4, §5.3.
#include "engines/pd_dialect.h"

#include <gtest/gtest.h>

namespace kvgate::engines::pd {
namespace {

TEST(PdDialect, VllmPrefillLegFollowsTheToyProxy) {
  // §4 item 2: stream false, max_tokens 1 (and max_completion_tokens 1 when present),
  // stream_options, min_tokens and min_completion_tokens removed, kv_transfer_params added.
  const std::string client =
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,)"
      R"("stream_options":{"include_usage":true},"max_tokens":50,"max_completion_tokens":60,)"
      R"("min_tokens":3,"min_completion_tokens":4,"temperature":0.5})";
  auto r = vllmPrefillBody(client);
  ASSERT_TRUE(r) << r.error().what;
  EXPECT_EQ(*r, R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.5,)"
                R"("stream":false,"max_tokens":1,"max_completion_tokens":1,)"
                R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,)"
                R"("remote_engine_id":null,"remote_block_ids":null,"remote_host":null,)"
                R"("remote_port":null}})");
  // No max_completion_tokens in the client body: none added.
  auto r2 = vllmPrefillBody(R"({"prompt":"x"})");
  ASSERT_TRUE(r2);
  EXPECT_EQ(*r2, R"({"prompt":"x","stream":false,"max_tokens":1,)"
                 R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,)"
                 R"("remote_engine_id":null,"remote_block_ids":null,"remote_host":null,)"
                 R"("remote_port":null}})");
}

TEST(PdDialect, EscapedKeysAreTheSameKeys) {
  // "stre\u0061m" is "stream" to the engine's JSON parser: it must be dropped too.
  auto r = vllmPrefillBody(R"({"stre\u0061m":true,"a\"b":1})");
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, R"({"a\"b":1,"stream":false,"max_tokens":1,)"
                R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,)"
                R"("remote_engine_id":null,"remote_block_ids":null,"remote_host":null,)"
                R"("remote_port":null}})");
}

TEST(PdDialect, VllmDecodeLegPassesTheParamsOpaque) {
  // Raw bytes of the prefill's kv_transfer_params, escapes and number spelling untouched.
  const std::string answer =
      R"({"id":"cmpl-1","choices":[{"text":"a"}],"kv_transfer_params":{"remote_engine_id":"e",)"
      R"("remote_block_ids":[1,2],"remote_port":5600,"x":1.50,"s":"\u00e9"}})";
  auto p = vllmTransferParams(answer);
  ASSERT_TRUE(p) << p.error().what;
  ASSERT_TRUE(p->has_value());
  EXPECT_EQ(**p, R"({"remote_engine_id":"e","remote_block_ids":[1,2],"remote_port":5600,"x":1.50,)"
                 R"("s":"\u00e9"})");
  auto d = vllmDecodeBody(R"({"prompt":"x","stream":true,"kv_transfer_params":{"evil":1}})", *p);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, R"({"prompt":"x","stream":true,"kv_transfer_params":)" + **p + "}");
  // null or absent: the decode leg gets the client's body without the key.
  auto none = vllmTransferParams(R"({"kv_transfer_params":null})");
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  auto absent = vllmTransferParams(R"({"choices":[]})");
  ASSERT_TRUE(absent);
  EXPECT_FALSE(absent->has_value());
  auto d2 = vllmDecodeBody(R"({ "prompt" : "x" })", std::nullopt);
  ASSERT_TRUE(d2);
  EXPECT_EQ(*d2, R"({"prompt":"x"})");
}

TEST(PdDialect, HostileBodiesAreClearErrors) {
  for (const char* bad : {"", "[]", "\"x\"", "{", "{\"a\":1} trailing", "{\"a\":}", "{\"a\" 1}",
                          "nul", "{\"a\":[1,}"}) {
    EXPECT_FALSE(vllmPrefillBody(bad)) << bad;
    EXPECT_FALSE(vllmDecodeBody(bad, std::nullopt)) << bad;
    EXPECT_FALSE(sglangBody(bad, "127.0.0.1", 8998, 1)) << bad;
    EXPECT_FALSE(trtllmContextBody(bad, 1)) << bad;
  }
  auto e = vllmTransferParams(R"({"kv_transfer_params":[1]})");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, 502);
  EXPECT_FALSE(vllmTransferParams("not json"));
  // An empty object is still an object.
  auto empty = vllmDecodeBody("{}", std::string("{}"));
  ASSERT_TRUE(empty);
  EXPECT_EQ(*empty, R"({"kv_transfer_params":{}})");
}

TEST(PdDialect, SglangAddsTheBootstrapTriple) {
  // §3.3: bootstrap_host (IPv6 bracketed), bootstrap_port (null when unset), bootstrap_room.
  auto r =
      sglangBody(R"({"prompt":"x","bootstrap_room":5})", "10.0.0.1", 8998, 9223372036854775807ULL);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, R"({"prompt":"x","bootstrap_host":"10.0.0.1","bootstrap_port":8998,)"
                R"("bootstrap_room":9223372036854775807})");
  auto v6 = sglangBody("{}", "fd00::1", 0, 7);
  ASSERT_TRUE(v6);
  EXPECT_EQ(*v6, R"({"bootstrap_host":"[fd00::1]","bootstrap_port":null,"bootstrap_room":7})");
}

TEST(PdDialect, TrtllmContextThenGeneration) {
  auto c = trtllmContextBody(R"({"prompt":"x","stream":true,"stream_options":{"a":1}})", 42);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c, R"({"prompt":"x","disaggregated_params":{"request_type":"context_only",)"
                R"("disagg_request_id":42},"stream":false,"stream_options":null})");
  const std::string answer =
      R"({"id":"c","choices":[{"index":0,"text":"a","finish_reason":"length",)"
      R"("disaggregated_params":{"request_type":"context_only","first_gen_tokens":[7],)"
      R"("ctx_request_id":9,"encoded_opaque_state":"QUJD","draft_tokens":null}}]})";
  auto a = trtllmContextAnswer(answer);
  ASSERT_TRUE(a) << a.error().what;
  EXPECT_FALSE(a->finished);
  auto g = trtllmGenerationBody(R"({"prompt":"x","stream":true})", a->params);
  ASSERT_TRUE(g);
  EXPECT_EQ(*g, R"({"prompt":"x","stream":true,"disaggregated_params":{"first_gen_tokens":[7],)"
                R"("ctx_request_id":9,"encoded_opaque_state":"QUJD","draft_tokens":null,)"
                R"("request_type":"generation_only"}})");
  // Finished by the context leg (a stop token): returned as is, no generation leg.
  auto done = trtllmContextAnswer(R"({"choices":[{"finish_reason":"stop"}]})");
  ASSERT_TRUE(done);
  EXPECT_TRUE(done->finished);
  auto not_finished = trtllmContextAnswer(
      R"({"choices":[{"finish_reason":"not_finished","disaggregated_params":{"a":1}}]})");
  ASSERT_TRUE(not_finished);
  EXPECT_FALSE(not_finished->finished);
  EXPECT_EQ(not_finished->params, R"({"a":1})");
  // Unfinished without params, no choices, not an object: 502.
  for (const char* bad : {R"({"choices":[{"finish_reason":"length"}]})", R"({"choices":[]})",
                          R"({"x":1})", "[]", R"({"choices":[1]})"}) {
    auto e = trtllmContextAnswer(bad);
    ASSERT_FALSE(e) << bad;
    EXPECT_EQ(e.error().code, 502) << bad;
  }
}

TEST(PdDialect, AFinishedContextAnswerLosesTheEnginesState) {
  const std::string answer =
      R"({"id":"c","choices":[{"index":0,"text":"a","finish_reason":"stop",)"
      R"("disaggregated_params":{"encoded_opaque_state":"QUJD"}}],"usage":{"prompt_tokens":3}})";
  auto plain = trtllmFinalAnswer(answer, false);
  ASSERT_TRUE(plain) << plain.error().what;
  EXPECT_EQ(*plain, R"({"id":"c","usage":{"prompt_tokens":3},)"
                    R"("choices":[{"index":0,"text":"a","finish_reason":"stop"}]})");
  auto sse = trtllmFinalAnswer(answer, true);
  ASSERT_TRUE(sse);
  EXPECT_EQ(*sse, "data: " + *plain + "\n\ndata: [DONE]\n\n");
  EXPECT_FALSE(trtllmFinalAnswer("[]", false));
  EXPECT_FALSE(trtllmFinalAnswer(R"({"choices":7})", false));
}

TEST(PdDialect, RequestIdNamesBothTransferAddresses) {
  EXPECT_EQ(pdRequestId("10.0.0.1:5600", "[fd00::2]:5601", "abc"),
            "___prefill_addr_10.0.0.1:5600___decode_addr_[fd00::2]:5601_abc");
  EXPECT_EQ(dialectFromName("sglang"), Dialect::kSglang);
  EXPECT_FALSE(dialectFromName("llamacpp"));
  EXPECT_STREQ(dialectName(Dialect::kTrtllm), "trtllm");
}

}  // namespace
}  // namespace kvgate::engines::pd
