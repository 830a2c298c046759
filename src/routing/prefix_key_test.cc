#include "routing/prefix_key.h"

#include <gtest/gtest.h>
#include <xxhash.h>

namespace kvgate::routing {
namespace {

uint64_t expected(std::string_view model, std::string_view salt, std::string_view rendered) {
  std::string m(model);
  m.push_back('\0');
  m += salt;
  m.push_back('\0');
  m += rendered;
  return XXH3_64bits(m.data(), m.size());
}

TEST(PrefixKey, ChatRenderingByHand) {
  auto k = computeBodyKeys(
      R"({"model":"m","messages":[{"role":"system","content":"Be brief."},)"
      R"({"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":" there"}]}]})",
      1024);
  ASSERT_TRUE(k.json_ok);
  ASSERT_TRUE(k.prefix_key);
  EXPECT_EQ(*k.prefix_key, expected("m", "",
                                    "system\x1f"
                                    "Be brief.\x1euser\x1fHi there\x1e"));
}

TEST(PrefixKey, OnlyTheFirstKBytesCount) {
  std::string a = R"({"model":"m","prompt":"SHAREDPREFIX-one"})";
  std::string b = R"({"model":"m","prompt":"SHAREDPREFIX-two"})";
  EXPECT_EQ(*computeBodyKeys(a, 12).prefix_key, *computeBodyKeys(b, 12).prefix_key);
  EXPECT_EQ(*computeBodyKeys(a, 12).prefix_key, expected("m", "", "SHAREDPREFIX"));
  EXPECT_NE(*computeBodyKeys(a, 1024).prefix_key, *computeBodyKeys(b, 1024).prefix_key);
}

TEST(PrefixKey, ModelAndCacheSaltSeparateKeys) {
  auto base = computeBodyKeys(R"({"model":"m","prompt":"x"})", 1024);
  auto other_model = computeBodyKeys(R"({"model":"n","prompt":"x"})", 1024);
  auto salted = computeBodyKeys(R"({"model":"m","prompt":"x","cache_salt":"tenant-a"})", 1024);
  EXPECT_NE(*base.prefix_key, *other_model.prefix_key);
  EXPECT_NE(*base.prefix_key, *salted.prefix_key);
  EXPECT_EQ(*salted.prefix_key, expected("m", "tenant-a", "x"));
}

TEST(PrefixKey, TokenIdPromptsAndUser) {
  auto k = computeBodyKeys(R"({"model":"m","prompt":[1,22,333],"user":"alice"})", 1024);
  EXPECT_EQ(*k.prefix_key, expected("m", "", "1,22,333,"));
  EXPECT_EQ(*k.user, "alice");
}

TEST(PrefixKey, HostileBodiesGiveNoKey) {
  EXPECT_FALSE(computeBodyKeys("", 1024).json_ok);
  EXPECT_FALSE(computeBodyKeys("{\"messages\":[1,2]}", 1024).prefix_key);
  EXPECT_FALSE(computeBodyKeys("{\"messages\":", 1024).json_ok);
  EXPECT_FALSE(computeBodyKeys(R"({"model":"m"})", 1024).prefix_key);  // nothing to key on
  std::string deep = "{\"prompt\":" + std::string(50000, '[');
  EXPECT_FALSE(computeBodyKeys(deep, 1024).prefix_key);
}

}  // namespace
}  // namespace kvgate::routing
