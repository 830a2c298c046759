// Integer knobs from the environment: a value outside [lo, hi] or not a number warns (naming the
// variable and the range) and means the default, so a typo never stops the gateway silently.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/log.h"

namespace kvgate::common {

// The value `v` of the variable `name` when it is a decimal integer in [lo, hi]; nullopt when
// unset or empty (`why` untouched) or unreadable (`why`: "ignoring NAME='v' (not lo..hi)").
inline std::optional<int64_t> parseEnvInt(const char* name, const char* v, int64_t lo, int64_t hi,
                                          std::string& why) {
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    why = std::string("ignoring ") + name + "='" + v + "' (not " + std::to_string(lo) + ".." +
          std::to_string(hi) + ")";
    return std::nullopt;
  }
  return x;
}

inline int64_t envInt(const char* name, int64_t lo, int64_t hi, int64_t dflt) {
  std::string why;
  const auto x = parseEnvInt(name, std::getenv(name), lo, hi, why);
  if (!why.empty()) log::warn("config", why + "; using " + std::to_string(dflt));
  return x.value_or(dflt);
}

}  // namespace kvgate::common
