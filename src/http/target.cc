#include "http/target.h"

#include "common/hex.h"
#include "common/percent.h"

namespace kvgate::http {
namespace {

bool unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

// The segment starting at `p` (just after a '/') up to the next '/' or the end.
std::string_view segmentAt(std::string_view path, size_t p) {
  size_t end = path.find('/', p);
  return path.substr(p, (end == std::string_view::npos ? path.size() : end) - p);
}

// RFC 3986 §5.2.4 on a path that starts with '/' and has no empty segment but possibly the last.
std::string removeDotSegments(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  size_t p = 1;  // after the leading '/'
  bool trailing = false;
  while (p <= in.size()) {
    std::string_view seg = segmentAt(in, p);
    const bool last = p + seg.size() >= in.size();
    if (seg == ".") {
      trailing = last;  // "/a/." -> "/a/"
    } else if (seg == "..") {
      size_t cut = out.rfind('/');
      out.resize(cut == std::string::npos ? 0 : cut);
      trailing = last;
    } else {
      out.push_back('/');
      out.append(seg);
      trailing = false;
    }
    p += seg.size() + 1;
  }
  if (trailing || out.empty()) out.push_back('/');
  return out;
}

}  // namespace

bool isCanonicalTarget(std::string_view target) {
  if (target.empty() || target.front() != '/') return false;
  if (target.find('#') != std::string_view::npos) return false;
  std::string_view path = target.substr(0, target.find('?'));
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c == '%') return false;
    if (c != '/') continue;
    if (i + 1 < path.size() && path[i + 1] == '/') return false;  // "//"
    std::string_view seg = segmentAt(path, i + 1);
    if (seg == "." || seg == "..") return false;
  }
  return true;
}

std::string normalizeTarget(std::string_view target, NormalizedTarget& out) {
  out.forward.clear();
  out.match.clear();
  if (target.empty() || target.front() != '/')
    return "only origin-form request targets (starting with '/') are served";
  // A fragment is never sent to a server (RFC 9112 §3.2); engines' URL parsers drop it, so the
  // path they route on would not be the one matched here.
  if (target.find('#') != std::string_view::npos)
    return "a fragment ('#') in a request target is refused";
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query =
      q == std::string_view::npos ? std::string_view() : target.substr(q);
  // 1. Escapes: unreserved decoded, the rest kept (upper-case hex) or refused; runs of '/' merged.
  std::string decoded;
  decoded.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    char c = path[i];
    if (c == '%') {
      const int hi = i + 2 < path.size() ? hexDigitValue(path[i + 1]) : -1;
      const int lo = hi >= 0 ? hexDigitValue(path[i + 2]) : -1;
      if (hi < 0 || lo < 0) return "malformed percent-encoding in the path";
      const auto b = static_cast<unsigned char>(hi * 16 + lo);
      if (b == '/' || b == '\\') return "an encoded '/' or '\\' (%2F, %5C) in the path is refused";
      if (b < 0x20 || b == 0x7f) return "an encoded control character in the path is refused";
      i += 2;
      if (unreserved(b)) {
        c = static_cast<char>(b);
      } else {
        static constexpr char kHex[] = "0123456789ABCDEF";
        decoded.push_back('%');
        decoded.push_back(kHex[b >> 4]);
        decoded.push_back(kHex[b & 15]);
        continue;
      }
    }
    if (c == '/' && !decoded.empty() && decoded.back() == '/') continue;  // merge "//"
    decoded.push_back(c);
  }
  // 2. Dot segments.
  out.forward = removeDotSegments(decoded);
  // 3. What the engine's router compares: every remaining escape decoded.
  out.match = percentDecode(out.forward, false);
  out.forward.append(query);
  return {};
}

}  // namespace kvgate::http
