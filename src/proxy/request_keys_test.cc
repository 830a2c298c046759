#include "proxy/request_keys.h"

#include <gtest/gtest.h>

namespace kvgate::proxy {
namespace {

TEST(ListParam, CookiesAndQueries) {
  EXPECT_EQ(listParam("a=1; sid=abc; b=2", ';', "sid"), "abc");
  EXPECT_EQ(listParam("sid=first;sid=second", ';', "sid"), "first");  // the first match
  EXPECT_EQ(listParam("x=1&s=42&y", '&', "s"), "42");
  EXPECT_EQ(listParam("x=1&flag&y=2", '&', "flag"), "");  // present without a value
  EXPECT_EQ(listParam("sids=1; id=2", ';', "sid"), "");   // no prefix matches
}

TEST(ListParam, HostileLists) {
  EXPECT_EQ(listParam("", ';', "sid"), "");
  EXPECT_EQ(listParam(";;;", ';', "sid"), "");
  EXPECT_EQ(listParam("   ", ';', "sid"), "");
  EXPECT_EQ(listParam("=v", ';', ""), "v");  // an empty key only matches an empty name
  std::string many(100000, ';');
  EXPECT_EQ(listParam(many + "sid=z", ';', "sid"), "z");
}

}  // namespace
}  // namespace kvgate::proxy
