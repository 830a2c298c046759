// The serviceArguments and endpoint field tables: name, JSON type, range, and whether the
// capability behind the field is active in this build. Every accepted field is listed here;
// anything else is rejected with 400 so that a typo never passes silently.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace kvgate::config {

enum class FieldType {
  kBool,
  kInt,
  kString,
  kEnum,
  kIp,
  kObject,
  kStringArray,
  kStringMap,
  kArray,
  kJson  // any JSON value up to 64 KiB; parseRule validates its content
};

struct FieldSpec {
  std::string_view name;
  FieldType type;
  int64_t min = 0;
  int64_t max = 0;                         // kInt range; kString max length
  std::vector<std::string_view> values{};  // kEnum
};

const std::vector<FieldSpec>& serviceFields();
const std::vector<FieldSpec>& endpointFields();
const FieldSpec* findField(const std::vector<FieldSpec>& table, std::string_view name);

}  // namespace kvgate::config
