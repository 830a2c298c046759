// Fuzz target: the P/D dialects' body rewrites (src/engines/pd_dialect.cc) over hostile bytes, as
// a client body and as an engine's prefill / context answer. Properties: no crash;
// deterministic; a rewrite that succeeds yields a JSON object text (starts with '{', ends with
// '}') that rewrites again to itself for the idempotent ones; an extracted kv_transfer_params
// is an object; errors carry a message.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engines/pd_dialect.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
bool isObject(const std::string& s) { return s.size() >= 2 && s.front() == '{' && s.back() == '}'; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::engines::pd;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto p1 = vllmPrefillBody(in), p2 = vllmPrefillBody(in);
  check(p1.has_value() == p2.has_value());
  if (p1) {
    check(*p1 == *p2 && isObject(*p1));
    auto again = vllmPrefillBody(*p1);  // its own output is a body it accepts
    check(again.has_value() && *again == *p1);
  } else {
    check(!p1.error().what.empty());
  }
  auto params = vllmTransferParams(in);
  if (params && *params) check(isObject(**params));
  auto d = vllmDecodeBody(in, params && *params ? **params : std::optional<std::string>());
  check(d.has_value() == p1.has_value());
  if (d) check(isObject(*d));
  auto s = sglangBody(in, "fd00::1", 8998, 42);
  check(s.has_value() == p1.has_value());
  auto c = trtllmContextBody(in, 7);
  check(c.has_value() == p1.has_value());
  auto ctx = trtllmContextAnswer(in);
  if (ctx && !ctx->finished) {
    check(isObject(ctx->params));
    if (p1) check(trtllmGenerationBody(in, ctx->params).has_value());
  }
  auto f1 = trtllmFinalAnswer(in, false), f2 = trtllmFinalAnswer(in, true);
  check(f1.has_value() == f2.has_value());
  if (f1) check(isObject(*f1) && *f2 == "data: " + *f1 + "\n\ndata: [DONE]\n\n");
  return 0;
}
