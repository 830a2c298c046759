// Request ids: the hex encoder against printf's, and the id's shape.
#include "common/ids.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace kvgate {
namespace {

TEST(Ids, Hex64MatchesPrintf) {
  std::mt19937_64 rng(1);
  std::vector<uint64_t> values = {0, 1, 9, 10, 15, 16, 0xabcdef, 0x0123456789abcdefULL,
                                  0xffffffffffffffffULL, 0x8000000000000000ULL, 0xa0a0a0a09f9f9f9fULL};
  for (int i = 0; i < 100000; ++i) values.push_back(rng());
  for (uint64_t v : values) {
    char want[17], got[16];
    std::snprintf(want, sizeof want, "%016llx", static_cast<unsigned long long>(v));
    hex64(v, got);
    ASSERT_EQ(std::string(got, 16), std::string(want, 16)) << v;
  }
}

TEST(Ids, RequestIdsAre32LowercaseHexAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = newRequestId();
    ASSERT_EQ(id.size(), 32u);
    for (char c : id) ASSERT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace kvgate
