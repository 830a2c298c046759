// Integer knobs from the environment: a value outside [lo, hi] or not a number warns (naming the
// variable and the range) and means the default, so a typo never stops the gateway silently.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/log.h"

namespace kvgate::common {

inline int64_t envInt(const char* name, int64_t lo, int64_t hi, int64_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    log::warn("config", std::string("ignoring ") + name + "='" + v + "' (not " +
                            std::to_string(lo) + ".." + std::to_string(hi) + "); using " +
                            std::to_string(dflt));
    return dflt;
  }
  return x;
}

}  // namespace kvgate::common
