#include "http/chunked.h"

#include <gtest/gtest.h>

namespace kvgate::http {
namespace {

TEST(Chunked, DecodesWholeMessageWithExtensionsAndTrailers) {
  std::string msg =
      "4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-T: 1\r\n\r\nNEXT";
  ChunkedScanner sc;
  std::string out;
  auto st = sc.feed(msg.data(), msg.size(), &out);
  EXPECT_TRUE(st.done);
  EXPECT_FALSE(st.error);
  EXPECT_EQ(out, "Wikipedia in\r\n\r\nchunks.");
  EXPECT_EQ(st.consumed, msg.size() - 4);  // "NEXT" belongs to the next message
}

TEST(Chunked, ByteAtATimeGivesTheSameResult) {
  std::string msg = "1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";
  ChunkedScanner sc;
  std::string out;
  size_t total = 0;
  bool done = false;
  for (char c : msg) {
    auto st = sc.feed(&c, 1, &out);
    ASSERT_FALSE(st.error);
    total += st.consumed;
    done = st.done;
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(total, msg.size());
  EXPECT_EQ(out, "abcdefghijklmnopqrstuvwxyz");
}

TEST(Chunked, RejectsHostileInput) {
  for (std::string bad :
       {std::string("zz\r\n"), std::string("4\r\nabcdX\r\n"), std::string("1234567890abcdef0\r\n"),
        std::string("\r\n"), std::string("4\nabcd\r\n"), std::string("-1\r\n")}) {
    ChunkedScanner sc;
    auto st = sc.feed(bad.data(), bad.size());
    EXPECT_TRUE(st.error) << bad;
  }
  ChunkedScanner sc;
  std::string ext = "1;" + std::string(5000, 'x');
  EXPECT_TRUE(sc.feed(ext.data(), ext.size()).error);
}

// Issue 9, bug 4: trailers are bounded in total, not only per line (2,000 lines of 100 bytes).
TEST(Chunked, TrailerSectionIsBoundedInTotal) {
  std::string many = "0\r\n";
  for (int i = 0; i < 2000; ++i)
    many += "X-T" + std::to_string(i) + ": " + std::string(90, 'v') + "\r\n";
  many += "\r\n";
  ChunkedScanner sc;
  EXPECT_TRUE(sc.feed(many.data(), many.size()).error);
  // Fed a byte at a time the bound holds as well.
  ChunkedScanner sc2;
  bool err = false;
  for (size_t i = 0; i < many.size() && !err; ++i) err = sc2.feed(many.data() + i, 1).error;
  EXPECT_TRUE(err);
  std::string few = "0\r\nX-Checksum: abc\r\nX-Other: d\r\n\r\n";
  ChunkedScanner ok;
  auto st = ok.feed(few.data(), few.size());
  EXPECT_TRUE(st.done);
  EXPECT_FALSE(st.error);
}

}  // namespace
}  // namespace kvgate::http
