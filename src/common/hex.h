// Lower-case hexadecimal text of raw bytes, and back (salts and digests stored as text).
#pragma once
#include <string>
#include <string_view>

namespace kvgate {

// The value of one hexadecimal digit, -1 for any other character.
inline int hexDigitValue(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

inline std::string toHex(std::string_view raw) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string h;
  h.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    h += kDigits[c >> 4];
    h += kDigits[c & 15];
  }
  return h;
}

// "" when `h` is not an even number of hex digits.
inline std::string fromHex(std::string_view h) {
  std::string raw;
  if (h.size() % 2) return raw;
  raw.reserve(h.size() / 2);
  for (size_t i = 0; i < h.size(); i += 2) {
    const int a = hexDigitValue(h[i]), b = hexDigitValue(h[i + 1]);
    if (a < 0 || b < 0) return {};
    raw += static_cast<char>(a * 16 + b);
  }
  return raw;
}

}  // namespace kvgate
