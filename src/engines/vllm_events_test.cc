// vLLM KV-event decoding against the golden batches of shared/golden/engine_vectors.json (bytes
// produced by msgspec as vLLM encodes them; the "decoded" field is the reference), and hostile
// input: truncated, mistyped and oversized payloads fail without crashing.
#include "engines/vllm_events.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../../tests/support/test_util.h"
#include "engines/msgpack.h"

namespace kvgate::engines {
namespace {

nlohmann::json golden() {
  std::ifstream in(std::string(KVGATE_GOLDEN_DIR) + "/engine_vectors.json");
  return nlohmann::json::parse(in);
}

using kvgate::testing::unhex;

// The expected 64-bit hash of a decoded golden value: an integer, or {"$bin_hex": digest}.
uint64_t expectedHash(const nlohmann::json& v) {
  if (v.is_object()) return foldHashBytes(unhex(v.at("$bin_hex").get<std::string>()));
  return v.get<uint64_t>();
}

// Compares a decoded event with the golden decoded event (array or map form).
void expectEvent(const KvEvent& e, const nlohmann::json& g) {
  const bool map = g.is_object();
  const std::string tag = map ? g.at("type").get<std::string>() : g.at(0).get<std::string>();
  auto field = [&](const char* name, size_t pos) -> nlohmann::json {
    if (map) return g.contains(name) ? g.at(name) : nlohmann::json();
    return pos < g.size() ? g.at(pos) : nlohmann::json();
  };
  if (tag == "AllBlocksCleared") {
    EXPECT_EQ(e.kind, KvEvent::Kind::kCleared);
    return;
  }
  const bool stored = tag == "BlockStored";
  EXPECT_EQ(e.kind, stored ? KvEvent::Kind::kStored : KvEvent::Kind::kRemoved);
  auto hashes = field("block_hashes", 1);
  ASSERT_EQ(e.block_hashes.size(), hashes.size());
  for (size_t i = 0; i < hashes.size(); ++i) EXPECT_EQ(e.block_hashes[i], expectedHash(hashes[i]));
  auto medium = field("medium", stored ? 6 : 2);
  EXPECT_EQ(e.medium, medium.is_null() ? "" : medium.get<std::string>());
  auto group = field("group_idx", stored ? 9 : 3);
  EXPECT_EQ(e.group_idx, group.is_null() ? 0 : group.get<int64_t>());
  if (!stored) return;
  auto parent = field("parent_block_hash", 2);
  EXPECT_EQ(e.has_parent, !parent.is_null());
  if (!parent.is_null()) {
    EXPECT_EQ(e.parent, expectedHash(parent));
  }
  EXPECT_EQ(e.token_ids, field("token_ids", 3).get<std::vector<uint32_t>>());
  EXPECT_EQ(e.block_size, field("block_size", 4).get<uint32_t>());
  auto lora = field("lora_name", 7);
  EXPECT_EQ(e.lora_name, lora.is_null() ? "" : lora.get<std::string>());
  auto kind = field("kv_cache_spec_kind", 10);
  EXPECT_EQ(e.spec_kind, kind.is_null() ? "" : kind.get<std::string>());
}

TEST(VllmEvents, EveryGoldenBatch) {
  auto g = golden();
  ASSERT_EQ(g.at("vllm_kv_event_batches").size(), 4u);
  for (const auto& b : g.at("vllm_kv_event_batches")) {
    SCOPED_TRACE(b.at("name").get<std::string>());
    std::string bytes = unhex(b.at("msgpack_hex").get<std::string>());
    ASSERT_EQ(bytes.size(), b.at("len").get<size_t>());
    KvEventBatch batch;
    std::string err;
    ASSERT_TRUE(decodeVllmBatch(bytes, batch, err)) << err;
    const auto& d = b.at("decoded");
    EXPECT_DOUBLE_EQ(batch.ts, d.at(0).get<double>());
    EXPECT_EQ(batch.dp_rank, d.size() >= 3 && !d.at(2).is_null() ? d.at(2).get<int64_t>() : -1);
    ASSERT_EQ(batch.events.size(), d.at(1).size());
    for (size_t i = 0; i < batch.events.size(); ++i) expectEvent(batch.events[i], d.at(1)[i]);
    EXPECT_EQ(batch.unknown_events, 0u);
  }
}

// Every strict prefix of every golden batch is a truncated payload: an error, never a crash and
// never a "successful" partial batch.
TEST(VllmEvents, EveryTruncationFails) {
  auto g = golden();
  for (const auto& b : g.at("vllm_kv_event_batches")) {
    std::string bytes = unhex(b.at("msgpack_hex").get<std::string>());
    for (size_t n = 0; n < bytes.size(); ++n) {
      KvEventBatch batch;
      std::string err;
      EXPECT_FALSE(decodeVllmBatch(std::string_view(bytes.data(), n), batch, err)) << n;
      EXPECT_FALSE(err.empty()) << n;
    }
  }
}

// A batch declaring more events than one engine step could publish is refused before any is
// decoded: 65,537 AllBlocksCleared events (1 byte each on the wire, hundreds in memory).
TEST(VllmEvents, TooManyEventsInOneBatchAreRefused) {
  // Each event: ["AllBlocksCleared"] (fixarray 1, fixstr 16).
  auto cleared = [](uint32_t n) {
    std::string b = "\x93\xcb";
    b.append(8, '\0');
    b += '\xdd';
    for (int i = 3; i >= 0; --i) b += static_cast<char>((n >> (8 * i)) & 0xff);
    const std::string ev = std::string("\x91\xb0") + "AllBlocksCleared";
    for (uint32_t i = 0; i < n; ++i) b += ev;
    b += '\xc0';  // dp_rank nil
    return b;
  };
  KvEventBatch batch;
  std::string err;
  EXPECT_TRUE(decodeVllmBatch(cleared(kMaxBatchEvents), batch, err)) << err;
  EXPECT_EQ(batch.events.size(), kMaxBatchEvents);
  KvEventBatch big;
  EXPECT_FALSE(decodeVllmBatch(cleared(kMaxBatchEvents + 1), big, err));
  EXPECT_NE(err.find("more than 65536 events"), std::string::npos) << err;
  EXPECT_TRUE(big.events.empty());
}

TEST(VllmEvents, HashFoldingTakesTheLastEightBytesBigEndian) {
  EXPECT_EQ(
      foldHashBytes(unhex("d830de3d42c00f25a2949b5d12d98642664a44872c1614c5b0147556276afc9c")),
      12687895063098490012ull);  // engines.md §2.4: the published int of this digest
  EXPECT_EQ(foldHashBytes(unhex("0102")), 0x0102u);
  EXPECT_EQ(foldHashBytes(""), 0u);
}

// Hand-built payloads (msgpack bytes written out here) for the tolerance rules.
TEST(VllmEvents, UnknownTagsKeysAndExtraFieldsAreIgnored) {
  // [1.0, [["Future", 1], {"type":"BlockRemoved","block_hashes":[5],"new_key":[1,2]},
  //        ["BlockRemoved", [-2], "GPU", 0, "extra"]], 3]
  std::string p = unhex(
      "93"
      "cb3ff0000000000000"
      "93"
      "92a6467574757265"
      "01"
      "83a474797065ac426c6f636b52656d6f766564ac626c6f636b5f686173686573"
      "9105"
      "a76e65775f6b6579"
      "920102"
      "95ac426c6f636b52656d6f766564"
      "91fe"
      "a3475055"
      "00"
      "a56578747261"
      "03");
  KvEventBatch b;
  std::string err;
  ASSERT_TRUE(decodeVllmBatch(p, b, err)) << err;
  EXPECT_EQ(b.unknown_events, 1u);
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.events[0].block_hashes, std::vector<uint64_t>{5});
  EXPECT_EQ(b.events[1].block_hashes, std::vector<uint64_t>{0xfffffffffffffffeull});  // signed
  EXPECT_EQ(b.events[1].medium, "GPU");
  EXPECT_EQ(b.dp_rank, 3);
}

TEST(VllmEvents, MapEnvelopeIsAccepted) {
  // {"events": [["AllBlocksCleared"]], "ts": 2}
  std::string p = unhex("82a66576656e74739191b0416c6c426c6f636b73436c6561726564a2747302");
  KvEventBatch b;
  std::string err;
  ASSERT_TRUE(decodeVllmBatch(p, b, err)) << err;
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.events[0].kind, KvEvent::Kind::kCleared);
  EXPECT_DOUBLE_EQ(b.ts, 2.0);
}

TEST(VllmEvents, ExtraKeysSplitIntoPartitionAndContent) {
  // ["BlockStored", [1, 2], nil, [0 x 4], 2, nil, "GPU", "lora-a",
  //   [["lora-a", "salt-1"], ["lora-a", ["mm-1", -1]]]]
  std::string ev = unhex(
      "99ab426c6f636b53746f726564"
      "920102"
      "c0"
      "9400000000"
      "02"
      "c0"
      "a3475055"
      "a66c6f72612d61"
      "92"
      "92a66c6f72612d61a673616c742d31"
      "92a66c6f72612d6192a46d6d2d31ff");
  std::string p = unhex("92cb3ff000000000000091") + ev;
  KvEventBatch b;
  std::string err;
  ASSERT_TRUE(decodeVllmBatch(p, b, err)) << err;
  ASSERT_EQ(b.events.size(), 1u);
  const KvEvent& e = b.events[0];
  EXPECT_EQ(e.lora_name, "lora-a");
  EXPECT_EQ(e.cache_salt, "salt-1");
  ASSERT_EQ(e.extras.size(), 2u);
  EXPECT_EQ(e.extras[0].content_mix, 0u);  // LoRA and salt only: partition, not content
  EXPECT_NE(e.extras[1].content_mix, 0u);  // a multimodal item: content the tokens do not show
}

TEST(VllmEvents, HostilePayloadsFailCleanly) {
  const char* cases[] = {
      "",                                // empty
      "c1",                              // reserved byte
      "dd ffffffff",                     // array of 4 billion with nothing after it
      "92cb3ff0000000000000dd7fffffff",  // events: huge declared count
      "92cb3ff000000000000091 92ab426c6f636b53746f726564 dbffffffff",  // huge string length
      "92cb3ff000000000000091 92ab426c6f636b53746f726564 01",          // block_hashes not an array
      "92cb3ff000000000000091 94ab426c6f636b53746f726564 9101 c0 91cf0000000100000000",  // token >
                                                                                         // u32
      "92cb3ff000000000000091 91ab426c6f636b53746f726564",  // BlockStored without hashes
      "92cb3ff000000000000091 81a474797065",                // map event, type without value
      "92cb3ff000000000000090 00",                          // bytes after the batch
      "92a1789100",                                         // ts not a number
      "91cb3ff0000000000000",                               // envelope too short
  };
  for (const char* c : cases) {
    std::string hex;
    for (const char* q = c; *q; ++q)
      if (*q != ' ') hex.push_back(*q);
    KvEventBatch b;
    std::string err;
    EXPECT_FALSE(decodeVllmBatch(unhex(hex), b, err)) << c;
    EXPECT_FALSE(err.empty()) << c;
  }
}

// A declared event count is never trusted for memory: a million one-byte nil "events" cost the
// decoder one failed event, not a million reserved KvEvents (each hundreds of bytes).
TEST(VllmEvents, DeclaredCountsDoNotReserveMemory) {
  std::string p = unhex("92cb3ff0000000000000dd000f4240") + std::string(1000000, '\xc0');
  KvEventBatch b;
  std::string err;
  EXPECT_FALSE(decodeVllmBatch(p, b, err));  // nil is not an event
  EXPECT_LT(b.events.capacity(), 16u);
}

// Events of a type we do not know are skipped whole, even when they reuse our field names with
// other types; a LoRA known only by its id gets a partition of its own.
TEST(VllmEvents, UnknownTypesAreSkippedAndLoraIdsPartition) {
  // [1.0, [{"type":"Future","medium":7}, ["BlockStored",[1],nil,[0],1,3]]]
  std::string p = unhex(
      "92cb3ff0000000000000"
      "92"
      "82a474797065a6467574757265a66d656469756d07"
      "96ab426c6f636b53746f726564"
      "9101"
      "c0"
      "9100"
      "01"
      "03");
  KvEventBatch b;
  std::string err;
  ASSERT_TRUE(decodeVllmBatch(p, b, err)) << err;
  EXPECT_EQ(b.unknown_events, 1u);
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.events[0].lora_name, "#lora_id:3");
}

TEST(Msgpack, SkipHandlesDeepNestingWithoutRecursion) {
  std::string deep(100000, '\x91');  // 100k nested arrays of one element
  deep.push_back('\x00');
  MsgpackReader r(deep.data(), deep.size());
  EXPECT_TRUE(r.skip());
  EXPECT_TRUE(r.atEnd());
  std::string cut(100000, '\x91');  // the same without the innermost value
  MsgpackReader r2(cut.data(), cut.size());
  EXPECT_FALSE(r2.skip());
}

TEST(Msgpack, IntegerWidthsAndRanges) {
  auto u = [](const std::string& hex, uint64_t& v) {
    std::string b = unhex(hex);
    MsgpackReader r(b.data(), b.size());
    return r.readUint(v);
  };
  auto s = [](const std::string& hex, int64_t& v) {
    std::string b = unhex(hex);
    MsgpackReader r(b.data(), b.size());
    return r.readInt(v);
  };
  uint64_t v;
  int64_t i;
  ASSERT_TRUE(u("cfffffffffffffffff", v));
  EXPECT_EQ(v, UINT64_MAX);
  ASSERT_TRUE(u("cd0100", v));
  EXPECT_EQ(v, 256u);
  EXPECT_FALSE(u("ff", v));  // -1 is not unsigned
  ASSERT_TRUE(s("d0ff", i));
  EXPECT_EQ(i, -1);
  ASSERT_TRUE(s("d1ff00", i));
  EXPECT_EQ(i, -256);
  ASSERT_TRUE(s("e0", i));
  EXPECT_EQ(i, -32);
  EXPECT_FALSE(s("cf8000000000000000", i));  // above INT64_MAX
  EXPECT_FALSE(s("d1ff", i));                // truncated
}

}  // namespace
}  // namespace kvgate::engines
