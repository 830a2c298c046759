// UTF-8 helpers (the tokenizer's, and the data plane's form reader): decoding one code point,
// checking text is valid UTF-8, and making arbitrary bytes valid UTF-8 the way the reference
// binding sees them (WHATWG decoding: each maximal invalid subpart becomes U+FFFD, as Node's
// Buffer->string and TextDecoder do before HF tokenizers gets a &str).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace kvgate {

// Decodes the code point at s[i] of VALID UTF-8 and advances i.
inline uint32_t nextCodePoint(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  if (b < 0xE0) {
    uint32_t c = ((b & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    i += 2;
    return c;
  }
  if (b < 0xF0) {
    uint32_t c = ((b & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 6) |
                 (static_cast<unsigned char>(s[i + 2]) & 0x3Fu);
    i += 3;
    return c;
  }
  uint32_t c = ((b & 0x07u) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3Fu) << 12) |
               ((static_cast<unsigned char>(s[i + 2]) & 0x3Fu) << 6) |
               (static_cast<unsigned char>(s[i + 3]) & 0x3Fu);
  i += 4;
  return c;
}

inline void appendUtf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// Length of the valid UTF-8 sequence at s[i], or 0 when it is invalid there. On 0, *bad is the
// length of the maximal invalid subpart (>= 1) that WHATWG replaces with one U+FFFD.
inline size_t validSequence(std::string_view s, size_t i, size_t* bad) {
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *bad = 1;
    return 0;
  }
  size_t j = 1;
  for (; j <= need; ++j) {
    if (i + j >= s.size()) break;
    auto b = static_cast<unsigned char>(s[i + j]);
    if (j == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
  }
  if (j == need + 1) return need + 1;
  *bad = j;  // the lead byte plus the continuation bytes that were still valid
  return 0;
}

// The end of the run of ASCII bytes starting at s[i] (eight bytes a step: rendered prompts are
// mostly ASCII, and this check ran over every prompt the gateway tokenizes).
inline size_t asciiRunEnd(std::string_view s, size_t i) {
  for (uint64_t w; i + 8 <= s.size(); i += 8) {
    std::memcpy(&w, s.data() + i, 8);
    if (w & 0x8080808080808080ull) break;
  }
  while (i < s.size() && static_cast<unsigned char>(s[i]) < 0x80) ++i;
  return i;
}

// The length of the valid UTF-8 prefix of `s`.
inline size_t validUtf8Prefix(std::string_view s) {
  size_t bad = 0;
  for (size_t i = asciiRunEnd(s, 0), n; i < s.size(); i = asciiRunEnd(s, i + n))
    if ((n = validSequence(s, i, &bad)) == 0) return i;
  return s.size();
}

// True when `s` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
inline bool isValidUtf8(std::string_view s) { return validUtf8Prefix(s) == s.size(); }

// Returns true when `s` is valid UTF-8; otherwise writes the WHATWG-repaired text to *fixed.
inline bool repairUtf8(std::string_view s, std::string* fixed) {
  size_t i = validUtf8Prefix(s);
  size_t bad = 0;
  if (i >= s.size()) return true;
  fixed->assign(s.substr(0, i));
  while (i < s.size()) {
    size_t n = validSequence(s, i, &bad);
    if (n) {
      fixed->append(s.substr(i, n));
      i += n;
    } else {
      fixed->append("\xEF\xBF\xBD");
      i += bad;
    }
  }
  return false;
}

}  // namespace kvgate
