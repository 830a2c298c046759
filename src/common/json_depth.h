// A nesting guard for untrusted JSON handed to nlohmann::json, whose DOM copy and destruction
// recurse per level: a body like [[[[...]]]] 200k deep would overflow the stack. Callers reject
// bodies nested deeper than a limit before parsing (400), so hostile input changes nothing.
#pragma once
#include <cstddef>
#include <string_view>

namespace kvgate {

constexpr size_t kMaxJsonDepth = 128;

// True when no array/object in `s` is nested deeper than `max_depth` (strings are skipped,
// escapes honoured). Malformed JSON may return true; the parser reports it.
inline bool jsonDepthWithin(std::string_view s, size_t max_depth = kMaxJsonDepth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

}  // namespace kvgate
