// Tests: two nlohmann DOMs are the same value with the same member order and the same number
// types all the way down (dump and == do not tell a signed integer from an unsigned one).
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>

namespace kvgate::testing {

inline bool sameTyped(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b) {
  if (a.type() != b.type() || a.size() != b.size()) return false;
  if (a.is_object()) {
    auto ib = b.items().begin();
    for (const auto& [k, v] : a.items()) {
      if (ib.key() != k || !sameTyped(v, ib.value())) return false;
      ++ib;
    }
    return true;
  }
  if (a.is_array()) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!sameTyped(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

}  // namespace kvgate::testing
