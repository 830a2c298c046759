// vLLM block hashes against every CBOR vector of tests/golden/engine_vectors.json (produced with
// python3-cbor2 and cross-checked against vLLM's own hashing functions): the CBOR payload bytes,
// the digest and the published event integer, block by block.
#include "engines/vllm_hash.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../../tests/support/test_util.h"

namespace kvgate::engines {
namespace {

using kvgate::testing::hex;

TEST(VllmHash, EveryCborGoldenVector) {
  std::ifstream in(std::string(KVGATE_GOLDEN_DIR) + "/engine_vectors.json");
  auto g = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& v : g.at("vllm_block_hash")) {
    auto algo = parseVllmHashAlgo(v.at("algo").get<std::string>());
    if (!algo) continue;  // pickle sha256 and *_msgpack: out of scope (engines.md §0b)
    SCOPED_TRACE(v.at("name").get<std::string>());
    const std::string none = vllmNoneHash(*algo, v.at("PYTHONHASHSEED").get<std::string>());
    EXPECT_EQ(hex(none), v.at("none_hash_hex").get<std::string>());
    std::vector<uint32_t> tokens;
    for (const auto& b : v.at("blocks"))
      for (uint32_t t : b.at("tokens").get<std::vector<uint32_t>>()) tokens.push_back(t);
    // A partial tail (num_tokens beyond the full blocks) is not hashed: add it to prove it.
    while (tokens.size() < v.at("num_tokens").get<size_t>()) tokens.push_back(7);
    VllmBlockRequest req;
    const auto& r = v.at("request");
    if (r.contains("lora_name")) req.lora_name = r.at("lora_name").get<std::string>();
    if (r.contains("cache_salt")) req.cache_salt = r.at("cache_salt").get<std::string>();
    if (r.contains("mm"))
      for (const auto& m : r.at("mm"))
        req.mm.push_back(
            {m.at(0).get<std::string>(), m.at(1).get<int64_t>(), m.at(2).get<int64_t>()});
    auto hashes = vllmBlockHashes(*algo, none, tokens, v.at("block_size").get<uint32_t>(), req);
    ASSERT_EQ(hashes.size(), v.at("blocks").size());
    for (size_t i = 0; i < hashes.size(); ++i) {
      const auto& b = v.at("blocks")[i];
      EXPECT_EQ(hex(hashes[i].payload), b.at("serialized_payload_hex").get<std::string>()) << i;
      EXPECT_EQ(hex(hashes[i].digest), b.at("hash_hex").get<std::string>()) << i;
      EXPECT_EQ(hashes[i].event_hash, b.at("event_uint64").get<uint64_t>()) << i;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 10);  // 9 sha256_cbor + 1 xxhash_cbor vectors
}

}  // namespace
}  // namespace kvgate::engines
