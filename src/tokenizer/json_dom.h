// The chat template's input DOM (nlohmann::ordered_json) built from one simdjson pass over the
// request's JSON, instead of nlohmann's own parser: on a metered Tier 1.5 chat request
// nlohmann's lexer was a fifth of the worker's CPU (docs/benchmarks.md, "One parse").
//
// The DOM is what nlohmann::ordered_json::parse would give: members in document order, a
// repeated key keeps its first position and takes its last value, strings unescaped, numbers read
// by nlohmann itself from their own text (integer, unsigned or float exactly as it types them).
// A document that is not an object, anything simdjson refuses, or nesting deeper than
// `max_depth`, gives nullopt: the caller then parses with nlohmann as before (same answer, same
// errors).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kvgate::tok {

// `text` must have simdjson's padding available past its size (domFromJsonPadding(): reserve
// text.size() + that before filling it); it is not modified.
std::optional<nlohmann::ordered_json> domFromJson(const std::string& text, size_t max_depth);
size_t domFromJsonPadding();

}  // namespace kvgate::tok
