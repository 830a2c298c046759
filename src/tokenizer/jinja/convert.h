// Value conversions with @huggingface/jinja semantics: context JSON -> Value, printing
// (RuntimeValue.toString), JS String(value.value) coercion, tojson, loose/strict equality and the
// ordering used by sort/min/max/dictsort.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tokenizer/jinja/value.h"

namespace kvgate::jinja {

Result<Value> fromJson(const nlohmann::ordered_json& j, Heap& heap, int depth = 0);

// What `{{ v }}` prints (null/undefined print nothing; the caller skips them).
Result<std::string> toDisplay(const Value& v, int depth = 0);
// JS `String(v.value)`: used by `~`, string `+` and `join`.
Result<std::string> jsString(const Value& v, int depth = 0);

struct JsonOptions {
  std::optional<int64_t> indent;  // falsy (none or 0) -> single line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::optional<std::pair<std::string, std::string>> separators;
  bool undefined_as_null = true;  // false when printing containers
};
Result<std::string> toJson(const Value& v, const JsonOptions& opt, int depth = 0);

// JS `a == b` on the runtime values' payloads (containers by identity).
bool looseEquals(const Value& a, const Value& b);
// JS `a.value === b.value` (used by `in`, unique, the eq test).
bool strictEquals(const Value& a, const Value& b);
// compareRuntimeValues(): -1/0/1, or an error for incomparable kinds.
Result<int> compareValues(const Value& a, const Value& b, bool case_sensitive);

}  // namespace kvgate::jinja
