// JSON string escaping shared by every hand-built JSON text (error bodies, logs, chat-template
// `tojson`): `"` `\` and control characters escaped (\b \f \n \r \t short forms, else \u00XX);
// with ensure_ascii (Python json.dumps' default) DEL and every non-ASCII code point too, as \uXXXX
// (UTF-16 surrogate pairs above U+FFFF; an invalid UTF-8 byte as U+FFFD).
#pragma once
#include <string>
#include <string_view>

namespace kvgate {

inline void appendJsonEscaped(std::string& out, std::string_view s, bool ensure_ascii = false) {
  static const char* kHex = "0123456789abcdef";
  auto unit = [&](unsigned u) {
    out += "\\u";
    for (int sh = 12; sh >= 0; sh -= 4) out += kHex[(u >> sh) & 15];
  };
  for (size_t pos = 0; pos < s.size();) {
    auto c = static_cast<unsigned char>(s[pos]);
    if (c >= 0x80 && ensure_ascii) {
      // Decode one UTF-8 sequence (invalid -> U+FFFD, one byte).
      size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      char32_t cp = len == 4 ? c & 0x07 : len == 3 ? c & 0x0F : c & 0x1F;
      bool ok = len > 1 && pos + len <= s.size();
      for (size_t k = 1; ok && k < len; ++k) {
        auto b = static_cast<unsigned char>(s[pos + k]);
        ok = (b & 0xC0) == 0x80;
        cp = (cp << 6) | (b & 0x3F);
      }
      if (!ok) {
        cp = 0xFFFD;
        len = 1;
      }
      if (cp > 0xFFFF) {
        unit(0xD800 + ((cp - 0x10000) >> 10));
        unit(0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        unit(static_cast<unsigned>(cp));
      }
      pos += len;
      continue;
    }
    ++pos;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7F))
          unit(c);
        else
          out += static_cast<char>(c);
    }
  }
}

}  // namespace kvgate
