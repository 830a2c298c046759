// Splitting a text into lines: nextLine returns the line that starts at `pos` (without its LF,
// nor a CR before it) and moves `pos` past it; a last line without LF counts. Loop while
// pos < text.size().
#pragma once
#include <string_view>

namespace kvgate {

inline std::string_view nextLine(std::string_view text, size_t& pos) {
  size_t nl = text.find('\n', pos);
  if (nl == std::string_view::npos) nl = text.size();
  std::string_view line = text.substr(pos, nl - pos);
  pos = nl + 1;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace kvgate
