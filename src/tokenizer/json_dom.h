// The chat template's input DOM (nlohmann::ordered_json) built by simdjson instead of nlohmann's
// own parser: on a metered Tier 1.5 chat request nlohmann's lexer was a fifth of the worker's CPU
// (docs/benchmarks.md, "One parse"). The facts parser converts "messages" and the template's
// other members during its one walk of the body (domFromValue); domFromJson converts a whole
// document (tests hold it equal to nlohmann's parser).
//
// The DOM is what nlohmann::ordered_json::parse would give: members in document order, a
// repeated key keeps its first position and takes its last value, strings unescaped, numbers read
// by nlohmann itself from their own text (integer, unsigned or float exactly as it types them).
#pragma once
#include <simdjson.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kvgate::tok {

// What converting a value gave: kOk; kRefused (valid so far, but past a limit below, or a value
// simdjson or nlohmann cannot decode though Python's json may: a lone surrogate escape, 1e400, a
// 400-digit integer, a NUL right after a number); kError (simdjson stopped: a syntax or structure
// error, or a token such as NaN or Infinity that Python's json accepts and simdjson does not).
enum class DomResult { kOk, kRefused, kError };

struct DomLimits {
  size_t max_depth = 128;            // nesting below the value converted
  size_t max_bytes = SIZE_MAX;       // about the JSON bytes converted (strings, numbers, syntax)
  bool refuse_big_integers = false;  // an integer past 64 bits (nlohmann would make it a float)
};

// Converts `v` into `out`, counting its bytes into `used` (kRefused once past lim.max_bytes).
DomResult domFromValue(simdjson::ondemand::value v, nlohmann::ordered_json& out,
                       const DomLimits& lim, size_t& used);

// A whole document (an object). `text` must have simdjson's padding available past its size
// (domFromJsonPadding(): reserve text.size() + that before filling it); it is not modified. A
// document that is not an object, anything simdjson refuses, or nesting deeper than `max_depth`,
// gives nullopt.
std::optional<nlohmann::ordered_json> domFromJson(const std::string& text, size_t max_depth);
size_t domFromJsonPadding();

}  // namespace kvgate::tok
