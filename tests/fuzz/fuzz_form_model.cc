// Fuzz target: the model field of form bodies (src/proxy/form_model.cc).
// Input: the first byte picks the Content-Type (urlencoded, multipart with boundary XyZ, or a
// Content-Type taken from the input up to the first newline), the rest is the body.
// Properties: no crash or hang on any input; a model read is at most kMaxFormModel bytes of
// valid UTF-8; from a multipart body it is bytes of the body; from an urlencoded body the body is
// ASCII; the same input gives the same answer.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "proxy/form_model.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::proxy;
  if (size == 0) return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string ct;
  switch (data[0] % 3) {
    case 0: ct = "application/x-www-form-urlencoded"; break;
    case 1: ct = "multipart/form-data; boundary=XyZ"; break;
    default: {
      const size_t nl = rest.find('\n');
      ct = rest.substr(0, nl);
      rest = nl == std::string::npos ? std::string() : rest.substr(nl + 1);
    }
  }
  std::string m, m2;
  const FormModel r = formModel(ct, rest, m);
  check(formModel(ct, rest, m2) == r);
  if (r != FormModel::kOne) return 0;
  check(m == m2 && m.size() <= kMaxFormModel);
  if (ct.starts_with("multipart")) check(rest.find(m) != std::string::npos);
  if (ct.starts_with("application/x-www")) {
    for (char c : rest) check(static_cast<unsigned char>(c) < 0x80);
  }
  return 0;
}
