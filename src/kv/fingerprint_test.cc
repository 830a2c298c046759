// The fingerprint chain against shared/golden/xxh3_fingerprint.json (computed with python3-xxhash).
#include "kv/fingerprint.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvgate::kv {
namespace {

nlohmann::json golden(const char* file) {
  std::ifstream in(std::string(KVGATE_GOLDEN_DIR) + "/" + file);
  return nlohmann::json::parse(in);
}

uint64_t dec(const nlohmann::json& j) { return std::stoull(j.at("dec").get<std::string>()); }

TEST(Fingerprint, EveryGoldenVector) {
  auto g = golden("xxh3_fingerprint.json");
  ASSERT_GE(g.at("vectors").size(), 10u);
  for (const auto& v : g.at("vectors")) {
    SCOPED_TRACE(v.at("name").get<std::string>());
    std::vector<uint32_t> tokens = v.at("tokens").get<std::vector<uint32_t>>();
    uint32_t bs = v.at("block_size").get<uint32_t>();
    std::optional<uint64_t> parent;
    if (!v.at("parent_prefix").is_null()) parent = dec(v.at("parent_prefix"));
    std::vector<uint64_t> out(tokens.size() / bs + 1);
    size_t n = prefixChain(tokens.data(), tokens.size(), bs, parent, out.data(), out.size());
    ASSERT_EQ(n, v.at("prefix_hashes").size());
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(contentHash(tokens.data() + i * bs, bs), dec(v.at("content_hashes")[i])) << i;
      EXPECT_EQ(out[i], dec(v.at("prefix_hashes")[i])) << i;
    }
  }
}

TEST(Fingerprint, ChainStopsAtMaxOut) {
  std::vector<uint32_t> t(64);
  uint64_t out[2];
  EXPECT_EQ(prefixChain(t.data(), t.size(), 16, std::nullopt, out, 2), 2u);
  EXPECT_EQ(prefixChain(t.data(), t.size(), 0, std::nullopt, out, 2), 0u);
}

TEST(Fingerprint, PartitionsNeverShareChains) {
  std::vector<uint32_t> t(32, 7);
  uint64_t plain[2], lora[2], salt[2], both[2];
  prefixChain(t.data(), t.size(), 16, partitionRoot("", ""), plain, 2);
  prefixChain(t.data(), t.size(), 16, partitionRoot("adapter-a", ""), lora, 2);
  prefixChain(t.data(), t.size(), 16, partitionRoot("", "adapter-a"), salt, 2);
  prefixChain(t.data(), t.size(), 16, partitionRoot("adapter-a", "s"), both, 2);
  EXPECT_FALSE(partitionRoot("", "").has_value());  // the default partition is the golden chain
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(plain[i], lora[i]);
    EXPECT_NE(lora[i], salt[i]);  // the same string as adapter or as salt differs
    EXPECT_NE(lora[i], both[i]);
  }
  EXPECT_NE(mixContent(5, 9), 5u);
  EXPECT_EQ(mixContent(5, 0), 5u);
}

}  // namespace
}  // namespace kvgate::kv
