// Fuzz target: request-target normalization (src/http/target.cc).
// Properties: a refused target gets a reason; an accepted one is forwarded as an origin-form
// target without a fragment, whose path has no empty, "." or ".." segment and normalizes to
// itself (idempotent); a target already canonical is forwarded unchanged; the match path is what
// percent-decoding the forwarded path gives.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "http/target.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
int hex(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::http;
  const std::string t(reinterpret_cast<const char*>(data), size);
  NormalizedTarget out;
  const std::string why = normalizeTarget(t, out);
  if (!why.empty()) return 0;
  check(!out.forward.empty() && out.forward[0] == '/');
  check(out.forward.find('#') == std::string::npos);
  const std::string path = out.forward.substr(0, out.forward.find('?'));
  check(path.find("//") == std::string::npos);
  check(path.find("/./") == std::string::npos && path.find("/../") == std::string::npos);
  check(!path.ends_with("/.") && !path.ends_with("/.."));
  NormalizedTarget again;
  check(normalizeTarget(out.forward, again).empty());
  check(again.forward == out.forward && again.match == out.match);
  if (isCanonicalTarget(t)) check(out.forward == t);
  // The match path is the forwarded path with its (upper-case) escapes decoded.
  std::string decoded;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%') {
      check(i + 2 < path.size() && hex(path[i + 1]) >= 0 && hex(path[i + 2]) >= 0);
      decoded.push_back(static_cast<char>(hex(path[i + 1]) * 16 + hex(path[i + 2])));
      i += 2;
    } else {
      decoded.push_back(path[i]);
    }
  }
  check(decoded == out.match);
  return 0;
}
