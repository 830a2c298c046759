// Field checks shared by the management API's JSON bodies: a value that must be a string of a
// bounded length, refused with a 400 that names the field.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"

namespace kvgate {

inline Result<std::string> jsonString(const nlohmann::json& v, const std::string& field, size_t lo,
                                      size_t hi) {
  if (!v.is_string() || v.get_ref<const std::string&>().size() < lo ||
      v.get_ref<const std::string&>().size() > hi)
    return fail(400, field, field + " must be a string of " + std::to_string(lo) + "-" +
                                std::to_string(hi) + " bytes");
  return v.get<std::string>();
}

}  // namespace kvgate
