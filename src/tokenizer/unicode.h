// Code-point classes for the pre-tokenizers, as the reference tokenizer (HF tokenizers' bundled
// Oniguruma) sees them. The table is generated from the reference by
// scripts/gen_unicode_table.mjs, so its Unicode version is the backend's, not the system's.
#pragma once
#include <cstdint>

namespace kvgate::tok {

enum CpClass : uint16_t {
  kL = 1,      // \p{L}
  kN = 2,      // \p{N}
  kM = 4,      // \p{M}
  kP = 8,      // \p{P}
  kS = 16,     // \p{S}
  kWS = 32,    // \s
  kLu = 64,    // \p{Lu}
  kLl = 128,   // \p{Ll}
  kLt = 256,   // \p{Lt}
  kLm = 512,   // \p{Lm}
  kLo = 1024,  // \p{Lo}
};

// Flags of code point c (0 for unassigned/other classes and for c > 0x10FFFF).
uint16_t cpFlags(uint32_t c);

}  // namespace kvgate::tok
