// Fuzz target: REST rule bodies (src/config/rule.cc, POST /netlox/v1/config/loadbalancer and the
// state file). Properties: malformed JSON and invalid rules are refused with a 4xx naming what
// was wrong, never a crash or an exception; an accepted rule round-trips: its stored form
// (toJson, what GET /all returns and the state file keeps) parses again, to the same rule key
// and the same stored form (a fixed point; the stored form leaves out fields given at their
// default, such as "security": 0, so the parsed arguments themselves may differ by those).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "config/rule.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvgate::config;
  if (size > 1 << 16) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = parseRuleText(text);
  if (!r) {
    check(r.error().code >= 400 && r.error().code < 500);
    check(!r.error().what.empty());
    return 0;
  }
  const std::string stored = r->toJson().dump();
  auto again = parseRuleText(stored);
  check(again.has_value());
  check(again->key() == r->key());
  check(again->endpoints.size() == r->endpoints.size());
  // What the rule does survives the round trip (fields whose default is not zero included).
  check(again->admin_up == r->admin_up);
  check(again->hsts_header == r->hsts_header);
  check(again->toJson().dump() == stored);
  return 0;
}
