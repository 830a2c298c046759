// SGLang page hashes against the golden vectors (tests/golden/engine_vectors.json
// "sglang_page_hash", read from the file), and SGLang batches through the gateway's decoder.
#include "engines/sglang.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "engines/vllm_events.h"
#include "events/hash_contract.h"

namespace kvgate::engines {
namespace {

TEST(Sglang, PageHashesMatchTheGoldenVectors) {
  std::ifstream in(std::string(KVGATE_GOLDEN_DIR) + "/engine_vectors.json");
  auto g = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& v : g.at("sglang_page_hash")) {
    std::vector<uint32_t> tokens;
    for (const auto& p : v.at("pages"))
      for (const auto& t : p.at("tokens")) tokens.push_back(t.get<uint32_t>());
    auto h = sglangPageHashes("", tokens, v.at("page_size").get<uint32_t>());
    ASSERT_EQ(h.size(), v.at("pages").size()) << v.at("name");
    for (size_t i = 0; i < h.size(); ++i) {
      EXPECT_EQ(h[i].event_hash, v.at("pages")[i].at("event_int64").get<int64_t>()) << v.at("name");
      std::string hex;
      for (unsigned char c : h[i].digest) {
        static const char* d = "0123456789abcdef";
        hex.push_back(d[c >> 4]);
        hex.push_back(d[c & 15]);
      }
      EXPECT_EQ(hex, v.at("pages")[i].at("digest_hex").get<std::string>());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3);  // 2 + 1 pages
}

// An SGLang batch (positional, signed hashes, one event per page) decodes with the vLLM decoder:
// hashes fold to their two's complement, the parent links the pages.
TEST(Sglang, BatchesDecodeAsEvents) {
  std::vector<uint32_t> tokens(32);
  for (uint32_t i = 0; i < 32; ++i) tokens[i] = i;
  auto h = sglangPageHashes("", tokens, 16);
  auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  std::vector<VllmEventOut> ev(2);
  ev[0].block_hashes = {u(h[0].event_hash)};
  ev[0].token_ids.assign(tokens.begin(), tokens.begin() + 16);
  ev[1].block_hashes = {u(h[1].event_hash)};
  ev[1].parent = u(h[0].event_hash);
  ev[1].token_ids.assign(tokens.begin() + 16, tokens.end());
  VllmEventOut rm;
  rm.kind = VllmEventOut::Kind::kRemoved;
  rm.block_hashes = {u(-5)};
  ev.push_back(rm);
  KvEventBatch b;
  std::string err;
  ASSERT_TRUE(decodeVllmBatch(encodeSglangBatch(1.5, ev, 3), b, err)) << err;
  EXPECT_EQ(b.dp_rank, 3);
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0].block_hashes[0], static_cast<uint64_t>(h[0].event_hash));
  EXPECT_FALSE(b.events[0].has_parent);
  EXPECT_TRUE(b.events[1].has_parent);
  EXPECT_EQ(b.events[1].parent, static_cast<uint64_t>(h[0].event_hash));
  EXPECT_EQ(b.events[1].token_ids.size(), 16u);
  EXPECT_EQ(b.events[1].medium, "GPU");
  EXPECT_EQ(b.events[2].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(b.events[2].block_hashes[0], static_cast<uint64_t>(int64_t{-5}));
  // The declared contract for sha256_sglang verifies both pages (the second from its parent).
  auto c = events::HashContract::make("sha256_sglang", "unused");
  ASSERT_NE(c, nullptr);
  auto r = c->check(b);
  EXPECT_EQ(r.ok, 2u);
  EXPECT_EQ(r.mismatch, 0u);
  b.events[0].block_hashes[0] ^= 1;  // a wrong hash: that page and its successor cannot verify
  auto c2 = events::HashContract::make("sha256_sglang", "");
  auto r2 = c2->check(b);
  EXPECT_EQ(r2.mismatch, 1u);
  EXPECT_EQ(r2.unverifiable, 1u);  // its parent never verified
  EXPECT_EQ(events::HashContract::make("xxh3_fingerprint", "0"), nullptr);
}

}  // namespace
}  // namespace kvgate::engines
