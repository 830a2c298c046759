// GPT-2's bytes_to_unicode, the table byte-level tokenizers store their vocabulary through:
// printable bytes (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) map to the same code point, the other 68 to
// U+0100 on, in byte order. Used by the BPE model (vocabulary strings to raw bytes) and the
// decoder (tokens back to bytes).
#pragma once
#include <array>
#include <cstdint>

namespace kvgate::tok {

struct ByteLevelTable {
  std::array<uint32_t, 256> to_cp{};       // byte -> code point
  std::array<int16_t, 0x144> to_byte{};    // code point -> byte (-1: none); all below U+0144
  ByteLevelTable() {
    to_byte.fill(-1);
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? b : 0x100 + n++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

inline const ByteLevelTable& byteLevelTable() {
  static const ByteLevelTable t;
  return t;
}
// The byte a code point stands for, -1 when it stands for none.
inline int byteLevelByte(uint32_t cp) {
  const auto& t = byteLevelTable().to_byte;
  return cp < t.size() ? t[cp] : -1;
}

}  // namespace kvgate::tok
