// A text decoded once into code points with their classes and byte offsets, so pre-tokenizers
// can scan classes without re-decoding UTF-8. Ranges are code-point index ranges [begin, end).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"
#include "common/utf8.h"

namespace kvgate::tok {

struct CpText {
  std::vector<uint32_t> cp;
  std::vector<uint16_t> fl;
  std::vector<uint32_t> off;  // byte offset of each code point; off[size] == bytes

  void assign(std::string_view s) {
    cp.clear();
    fl.clear();
    off.clear();
    size_t i = 0;
    while (i < s.size()) {
      off.push_back(static_cast<uint32_t>(i));
      uint32_t c = nextCodePoint(s, i);
      cp.push_back(c);
      fl.push_back(cpFlags(c));
    }
    off.push_back(static_cast<uint32_t>(s.size()));
  }
  size_t size() const { return cp.size(); }
};

struct Range {
  uint32_t begin, end;
};

}  // namespace kvgate::tok
