// TensorRT-LLM block keys against the golden vectors (engine_vectors.json "trtllm_v1_block_key",
// read from the file) and the drain's JSON, well-formed and hostile.
#include "engines/trtllm.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace kvgate::engines {
namespace {

TEST(Trtllm, BlockKeysMatchTheGoldenVectors) {
  std::ifstream in(std::string(KVGATE_GOLDEN_DIR) + "/engine_vectors.json");
  auto g = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& v : g.at("trtllm_v1_block_key")) {
    if (v.contains("lora_task_id")) continue;  // LoRA mixing: not reproduced (unverifiable)
    const std::string range = v.at("tokens");  // "a..b"
    const uint32_t a = static_cast<uint32_t>(std::stoul(range.substr(0, range.find('.'))));
    const uint32_t b = static_cast<uint32_t>(std::stoul(range.substr(range.rfind('.') + 1)));
    std::vector<uint32_t> t;
    for (uint32_t x = a; x <= b; ++x) t.push_back(x);
    ASSERT_EQ(t.size(), v.at("tokens_per_block").get<size_t>());
    EXPECT_EQ(trtllmBlockKey(t.data(), t.size(), v.at("parent").get<uint64_t>()),
              v.at("block_hash_uint64").get<uint64_t>());
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

TEST(Trtllm, DrainAnswersDecodeExactly) {
  std::vector<uint32_t> tokens(64);
  for (uint32_t i = 0; i < 64; ++i) tokens[i] = i;
  const uint64_t k0 = trtllmBlockKey(tokens.data(), 32, 0);
  const uint64_t k1 = trtllmBlockKey(tokens.data() + 32, 32, k0);
  const std::string json =
      "[" + trtllmStoredJson(7, 0, {k0, k1}, tokens, 32) + "," + trtllmRemovedJson(8, {k1}) +
      R"(,{"event_id":9,"data":{"type":"created","num_blocks_per_cache_level":[100]},"window_size":1},)"
      R"({"event_id":10,"attention_dp_rank":1,"data":{"type":"removed","block_hashes":[18446744073709551615]}}])";
  std::vector<TrtllmEvent> ev;
  std::string err;
  ASSERT_TRUE(decodeTrtllmEvents(json, ev, err)) << err;
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].event_id, 7u);
  EXPECT_TRUE(ev[0].relevant);
  EXPECT_EQ(ev[0].event.kind, KvEvent::Kind::kStored);
  EXPECT_FALSE(ev[0].event.has_parent);
  EXPECT_EQ(ev[0].event.block_hashes, (std::vector<uint64_t>{k0, k1}));
  EXPECT_EQ(ev[0].event.block_size, 32u);
  EXPECT_EQ(ev[0].event.token_ids, tokens);
  EXPECT_EQ(ev[1].event.kind, KvEvent::Kind::kRemoved);
  EXPECT_FALSE(ev[2].relevant);  // created: nothing for the index
  EXPECT_EQ(ev[3].rank, 1);
  EXPECT_EQ(ev[3].event.block_hashes[0], UINT64_MAX);  // exact, not through a double
}

TEST(Trtllm, HostileAnswersAreRejectedWhole) {
  std::vector<TrtllmEvent> ev;
  std::string err;
  for (
      const char* bad : {
          "",
          "{}",
          "[1]",
          R"([{"event_id":-1,"data":{}}])",
          R"([{"event_id":1}])",
          R"([{"event_id":1.5,"data":{}}])",
          R"([{"event_id":1,"data":{"type":"removed","block_hashes":[1.8e19]}}])",
          R"([{"event_id":1,"data":{"type":"removed","block_hashes":[18446744073709551616]}}])",
          R"([{"event_id":1,"data":{"type":"removed","block_hashes":[-3]}}])",
          R"([{"event_id":1,"data":{"type":"removed"}}])",
          R"([{"event_id":1,"data":{"type":"stored","blocks":[{"block_hash":1,"tokens":[]}]}}])",
          R"([{"event_id":1,"data":{"type":"stored","blocks":[{"block_hash":1,"tokens":[{"token_id":4294967296}]}]}}])",
          R"([{"event_id":1,"data":{"type":"stored","parent_hash":"x","blocks":[]}}])",
          R"([{"event_id":1,"attention_dp_rank":99999,"data":{}}])",
      }) {
    EXPECT_FALSE(decodeTrtllmEvents(bad, ev, err)) << bad;
    EXPECT_TRUE(ev.empty()) << bad;
  }
  ev.push_back({});  // a valid event before an invalid one: still rejected whole
  EXPECT_FALSE(
      decodeTrtllmEvents("[" + trtllmRemovedJson(1, {5}) +
                             R"(,{"event_id":2,"data":{"type":"removed","block_hashes":[-1]}}])",
                         ev, err));
  EXPECT_TRUE(ev.empty());
  std::string deep(100000, '[');
  EXPECT_FALSE(decodeTrtllmEvents(deep, ev, err));
  // Blocks of different sizes in one stored event do not fit block_hashes x block_size.
  EXPECT_FALSE(decodeTrtllmEvents(
      R"([{"event_id":1,"data":{"type":"stored","blocks":[{"block_hash":1,"tokens":[{"token_id":1}]},)"
      R"({"block_hash":2,"tokens":[{"token_id":1},{"token_id":2}]}]}}])",
      ev, err));
}

}  // namespace
}  // namespace kvgate::engines
