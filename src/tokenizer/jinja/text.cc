// UTF-8 / JS string helpers (see text.h).
#include "tokenizer/jinja/text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace kvgate::jinja::text {

char32_t decode(std::string_view s, size_t pos, size_t& len) {
  auto c = static_cast<unsigned char>(s[pos]);
  len = 1;
  if (c < 0x80) return c;
  int n = c >= 0xC2 && c < 0xE0 ? 1 : c >= 0xE0 && c < 0xF0 ? 2 : c >= 0xF0 && c < 0xF5 ? 3 : 0;
  if (n == 0) return 0xFFFD;
  char32_t cp = c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    if (pos + k >= s.size()) return 0xFFFD;
    auto cc = static_cast<unsigned char>(s[pos + k]);
    if ((cc & 0xC0) != 0x80) return 0xFFFD;
    cp = (cp << 6) | (cc & 0x3F);
  }
  len = static_cast<size_t>(n) + 1;
  return cp;
}

void appendUtf8(std::string& out, char32_t cp) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // lone surrogate (from \u escapes)
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool isJsSpace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t spaceLenAt(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  size_t len = 0;
  char32_t cp = decode(s, pos, len);
  return isJsSpace(cp) ? len : 0;
}

std::string_view trimStart(std::string_view s) {
  size_t pos = 0;
  while (size_t n = spaceLenAt(s, pos)) pos += n;
  return s.substr(pos);
}

std::string_view trimEnd(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;  // walk back to the lead byte of the last code point
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
      --start;
    size_t len = 0;
    char32_t cp = decode(s, start, len);
    if (start + len != end) {
      start = end - 1;
      cp = 0xFFFD;
    }
    if (!isJsSpace(cp)) break;
    end = start;
  }
  return s.substr(0, end);
}

std::string_view trim(std::string_view s) { return trimEnd(trimStart(s)); }

size_t utf16Length(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 0;
    char32_t cp = decode(s, pos, len);
    n += cp > 0xFFFF ? 2 : 1;
    pos += len;
  }
  return n;
}

size_t codePointLength(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) {
    size_t len = 0;
    decode(s, pos, len);
    pos += len;
  }
  return n;
}

bool isPySpace(char32_t cp) {
  switch (cp) {
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F) ||
             (cp >= 0x2000 && cp <= 0x200A);
  }
}

std::string pyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars)
    for (size_t pos = 0; pos < chars->size();) {
      size_t len = 0;
      set.push_back(decode(*chars, pos, len));
      pos += len;
    }
  auto strip = [&](char32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : isPySpace(cp);
  };
  std::vector<std::pair<size_t, size_t>> cps;  // (offset, length) of each code point
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 0;
    decode(s, pos, len);
    cps.emplace_back(pos, len);
    pos += len;
  }
  size_t a = 0, b = cps.size();
  auto cpAt = [&](size_t k) {
    size_t len = 0;
    return decode(s, cps[k].first, len);
  };
  if (left)
    while (a < b && strip(cpAt(a))) ++a;
  if (right)
    while (b > a && strip(cpAt(b - 1))) --b;
  if (a == b) return {};
  return std::string(s.substr(cps[a].first, cps[b - 1].first + cps[b - 1].second - cps[a].first));
}

std::vector<std::string_view> codePoints(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos < s.size();) {
    size_t len = 0;
    decode(s, pos, len);
    out.push_back(s.substr(pos, len));
    pos += len;
  }
  return out;
}

std::string asciiUpper(std::string_view s) {
  std::string r(s);
  for (char& c : r)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  return r;
}

std::string asciiLower(std::string_view s) {
  std::string r(s);
  for (char& c : r)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  return r;
}

static bool isWordByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string titleCase(std::string_view s) {
  std::string r(s);
  for (size_t k = 0; k < r.size(); ++k) {
    if (isWordByte(r[k]) && (k == 0 || !isWordByte(r[k - 1])) && r[k] >= 'a' && r[k] <= 'z') {
      r[k] = static_cast<char>(r[k] - 32);
    }
  }
  return r;
}

std::string capitalize(std::string_view s) {
  std::string r(s);
  if (!r.empty() && r[0] >= 'a' && r[0] <= 'z') r[0] = static_cast<char>(r[0] - 32);
  return r;
}

std::string jsNumber(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t epos = sci.find('e');
  int exp = std::atoi(sci.c_str() + epos + 1);
  std::string digits;
  for (size_t k = 0; k < epos; ++k)
    if (sci[k] != '.') digits += sci[k];
  int k = static_cast<int>(digits.size());
  int n = exp + 1;
  std::string out;
  if (k <= n && n <= 21) {
    out = digits + std::string(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out = digits.substr(0, static_cast<size_t>(n)) + "." + digits.substr(static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out = "0." + std::string(static_cast<size_t>(-n), '0') + digits;
  } else {
    int e = n - 1;
    std::string es = (e >= 0 ? "+" : "-") + std::to_string(e >= 0 ? e : -e);
    out = k == 1 ? digits + "e" + es : digits.substr(0, 1) + "." + digits.substr(1) + "e" + es;
  }
  return sign + out;
}

std::string floatRepr(double d) {
  if (d == 0 && std::signbit(d)) return "-0.0";
  if (std::isfinite(d) && std::fmod(d, 1.0) == 0) {
    if (std::fabs(d) >= 1e21) return jsNumber(d);  // toFixed falls back to String() there
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.1f", d);
    return buf;
  }
  return jsNumber(d);
}

static size_t scanDecimal(std::string_view s, size_t pos, bool allow_sign) {
  size_t p = pos;
  if (allow_sign && p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
  if (s.substr(p, 8) == "Infinity") return p + 8;
  size_t int_start = p;
  while (p < s.size() && s[p] >= '0' && s[p] <= '9') ++p;
  bool int_digits = p > int_start;
  bool frac_digits = false;
  if (p < s.size() && s[p] == '.') {
    size_t q = p + 1;
    while (q < s.size() && s[q] >= '0' && s[q] <= '9') ++q;
    frac_digits = q > p + 1;
    if (int_digits || frac_digits) p = q;
  }
  if (!int_digits && !frac_digits) return pos;
  if (p < s.size() && (s[p] == 'e' || s[p] == 'E')) {
    size_t q = p + 1;
    if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
    size_t ds = q;
    while (q < s.size() && s[q] >= '0' && s[q] <= '9') ++q;
    if (q > ds) p = q;
  }
  return p;
}

static double toDouble(std::string_view s) {
  std::string t(s);
  bool neg = !t.empty() && t[0] == '-';
  if (t.find("Infinity") != std::string::npos) {
    return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  return std::strtod(t.c_str(), nullptr);
}

double jsToNumber(std::string_view s) {
  s = trim(s);
  if (s.empty()) return 0;
  if (s.size() > 2 && s[0] == '0' &&
      (s[1] == 'x' || s[1] == 'X' || s[1] == 'o' || s[1] == 'O' || s[1] == 'b' || s[1] == 'B')) {
    int base = (s[1] == 'x' || s[1] == 'X') ? 16 : (s[1] == 'o' || s[1] == 'O') ? 8 : 2;
    double v = 0;
    for (size_t k = 2; k < s.size(); ++k) {
      char c = s[k];
      int d = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : 99;
      if (d >= base) return std::nan("");
      v = v * base + d;
    }
    return v;
  }
  size_t end = scanDecimal(s, 0, true);
  if (end != s.size()) return std::nan("");
  return toDouble(s);
}

int64_t jsParseInt(std::string_view s, bool& ok) {
  s = trimStart(s);
  size_t p = 0;
  bool neg = false;
  if (p < s.size() && (s[p] == '+' || s[p] == '-')) neg = s[p++] == '-';
  int64_t v = 0;
  size_t start = p;
  constexpr int64_t kCap = std::numeric_limits<int64_t>::max() / 10 - 10;
  while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
    if (v < kCap) v = v * 10 + (s[p] - '0');  // saturates (JS would keep a lossy double)
    ++p;
  }
  ok = p > start;
  return neg ? -v : v;
}

double jsParseFloat(std::string_view s, bool& ok) {
  s = trimStart(s);
  size_t end = scanDecimal(s, 0, true);
  ok = end > 0;
  return ok ? toDouble(s.substr(0, end)) : 0;
}

}  // namespace kvgate::jinja::text
