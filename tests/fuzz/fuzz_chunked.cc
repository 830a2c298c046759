// Fuzz target: the chunked-transfer scanner (src/http/chunked.cc).
// Properties: consumed never exceeds the input; the decoded payload never exceeds what was
// consumed; feeding the same bytes in two pieces (split at a point taken from the input) gives the
// same verdict, consumed count and payload as feeding them at once (the scanner is incremental).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "http/chunked.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvgate::http::ChunkedScanner;
  if (size == 0) return 0;
  const size_t split = data[0] % (size);  // first byte picks the split point
  const char* p = reinterpret_cast<const char*>(data) + 1;
  const size_t n = size - 1;
  ChunkedScanner whole;
  std::string dw;
  auto a = whole.feed(p, n, &dw);
  check(a.consumed <= n && dw.size() <= a.consumed);
  ChunkedScanner parts;
  std::string dp;
  const size_t cut = split < n ? split : n;
  auto b1 = parts.feed(p, cut, &dp);
  size_t consumed = b1.consumed;
  bool err = b1.error, done = b1.done;
  if (!err && !done) {
    check(b1.consumed == cut);  // an unfinished, valid piece is consumed entirely
    auto b2 = parts.feed(p + cut, n - cut, &dp);
    consumed += b2.consumed;
    err = b2.error;
    done = b2.done;
  }
  check(err == a.error && done == a.done);
  if (!err) {
    check(consumed == a.consumed);
    check(dp == dw);
  }
  return 0;
}
