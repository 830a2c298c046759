// The logger's escaping (no field can forge a line) and its bound.
#include "common/log.h"

#include <gtest/gtest.h>

namespace kvgate::log {
namespace {

TEST(LogField, PlainValuesStayPlain) {
  std::string l;
  appendField(l, "model", "llama-3");
  EXPECT_EQ(l, " model=llama-3");
}

TEST(LogField, ControlBytesQuotesAndSpacesAreEscaped) {
  std::string l;
  appendField(l, "model", "m\n2026-01-01T00:00:00.000Z INFO proxy access id=forged");
  EXPECT_EQ(l.find('\n'), std::string::npos);
  EXPECT_EQ(l, " model=\"m\\n2026-01-01T00:00:00.000Z INFO proxy access id=forged\"");
  l.clear();
  appendField(l, "k", std::string_view("a\"b\\c\r\td\x01\x7f", 10));
  EXPECT_EQ(l, " k=\"a\\\"b\\\\c\\r\\td\\x01\\x7f\"");
  l.clear();
  appendField(l, "k", "");
  EXPECT_EQ(l, " k=\"\"");
  l.clear();
  appendField(l, "k", "a=b");
  EXPECT_EQ(l, " k=\"a=b\"");
}

TEST(LogField, MessagesAreEscapedToo) {
  std::string l;
  appendEscaped(l, "line1\nline2\r");
  EXPECT_EQ(l, "line1\\nline2\\r");
}

TEST(LogSink, ALineLargerThanTheBufferIsDroppedAndCounted) {
  uint64_t before = droppedLines();
  write(Level::kError, "test", std::string(kMaxPending + 1, 'x'));
  EXPECT_EQ(droppedLines(), before + 1);
  write(Level::kError, "test", "a normal line is kept");
  flush();
  EXPECT_EQ(droppedLines(), before + 1);
}

}  // namespace
}  // namespace kvgate::log
