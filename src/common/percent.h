// Percent-decoding as Python's urllib.parse.unquote (and, with `plus_is_space`, unquote_plus)
// does it: %XY becomes the byte, an escape that is not two hex digits stays as written. Used
// where the gateway must read what a Python engine reads: query strings of the management API,
// form fields (proxy/form_model.cc), request paths (http/target.cc).
#pragma once
#include <string>
#include <string_view>

#include "common/hex.h"

namespace kvgate {

inline std::string percentDecode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hexDigitValue(s[i + 1]) >= 0 &&
        hexDigitValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hexDigitValue(s[i + 1]) * 16 + hexDigitValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(plus_is_space && s[i] == '+' ? ' ' : s[i]);
    }
  }
  return out;
}

}  // namespace kvgate
