#include "http/parser.h"

#include <array>
#include <cstdint>
#include <cstring>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace kvgate::http {
namespace {

// tchar per RFC 9110 §5.6.2.
constexpr std::array<bool, 256> makeTchar() {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[static_cast<size_t>(c)] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[static_cast<size_t>(c)] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[static_cast<size_t>(c)] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}
constexpr std::array<bool, 256> kTchar = makeTchar();

inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }

inline std::string_view trimOws(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

int fail(ParseError& err, int status, const char* reason) {
  err.status = status;
  err.reason = reason;
  return -1;
}

// Finds the end of the head ("\r\n\r\n"); returns offset past it or 0.
size_t findHeadEnd(const char* data, size_t len) {
  if (len < 4) return 0;
  const char* p = data;
  const char* end = data + len;
  while (p + 3 < end) {
    const void* cr = std::memchr(p, '\r', static_cast<size_t>(end - p - 3));
    if (!cr) return 0;
    p = static_cast<const char*>(cr);
    if (p[1] == '\n' && p[2] == '\r' && p[3] == '\n') return static_cast<size_t>(p + 4 - data);
    ++p;
  }
  return 0;
}

bool parseVersion(std::string_view v, int& minor) {
  if (v.size() != 8 || v.substr(0, 7) != "HTTP/1.") return false;
  if (v[7] != '0' && v[7] != '1') return false;
  minor = v[7] - '0';
  return true;
}

// The first byte in [p, end) that is a control character (< 0x20) or DEL, else `end`: sixteen
// bytes a step with SSE2 (x86-64's baseline), the rest one by one.
inline const char* findCtl(const char* p, const char* end) {
#ifdef __SSE2__
  const __m128i space = _mm_set1_epi8(0x20), del = _mm_set1_epi8(0x7f);
  while (end - p >= 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i printable = _mm_cmpeq_epi8(_mm_max_epu8(x, space), x);  // x >= 0x20
    const int bad = ~_mm_movemask_epi8(printable) | _mm_movemask_epi8(_mm_cmpeq_epi8(x, del));
    if (bad & 0xffff) return p + __builtin_ctz(static_cast<unsigned>(bad & 0xffff));
    p += 16;
  }
#endif
  for (; p < end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c < 0x20 || c == 0x7f) return p;
  }
  return end;
}

// Why a header line whose name did not parse is wrong (the rare path: scanned again).
int headerLineError(const char* p, const char* end, ParseError& err) {
  const char* eol = static_cast<const char*>(std::memchr(p, '\r', static_cast<size_t>(end - p)));
  if (!eol || eol[1] != '\n') return fail(err, 400, "malformed header line");
  if (eol == p) return fail(err, 400, "malformed header block");
  if (*p == ' ' || *p == '\t') return fail(err, 400, "obs-fold header line");
  const void* colon = std::memchr(p, ':', static_cast<size_t>(eol - p));
  if (!colon || colon == p) return fail(err, 400, "malformed header line");
  return fail(err, 400, "invalid header name");
}

// Parses header lines in [p, end) where end points at the final "\r\n" of the head. One pass
// per line: the name's tchars up to ':', then the value up to its CR, each byte looked at once
// (a control character other than HTAB, or DEL, refuses the line).
int parseHeaders(const char* p, const char* end, HeadCommon& h, ParseError& err, bool is_request) {
  h.num_headers = 0;
  h.headers.count = 0;
  h.name_sizes = 0;
  bool seen_cl = false, seen_te = false;
  while (p < end) {
    const char* q = p;
    while (q < end && kTchar[static_cast<unsigned char>(*q)]) ++q;
    if (q == p || q == end || *q != ':') return headerLineError(p, end, err);
    const std::string_view name(p, static_cast<size_t>(q - p));
    const char* vbeg = q + 1;
    const char* cr = vbeg;
    for (;;) {
      cr = findCtl(cr, end);
      if (cr == end || *cr != '\t') break;
      ++cr;
    }
    if (cr == end) return fail(err, 400, "malformed header line");
    if (*cr != '\r') {  // a control byte in the value, unless the line itself is broken
      const void* eol = std::memchr(cr, '\r', static_cast<size_t>(end - cr));
      if (!eol || static_cast<const char*>(eol)[1] != '\n')
        return fail(err, 400, "malformed header line");
      return fail(err, 400, "invalid header value");
    }
    if (cr[1] != '\n') return fail(err, 400, "malformed header line");
    const std::string_view value =
        trimOws(std::string_view(vbeg, static_cast<size_t>(cr - vbeg)));
    p = cr + 2;
    if (h.num_headers == kMaxHeaders) return fail(err, 431, "too many headers");
    h.headers.set(h.num_headers++, Header{name, value});
    h.name_sizes |= uint64_t{1} << (name.size() & 63);
    h.headers.count = h.num_headers;

    if (iequals(name, "content-length")) {
      uint64_t v = 0;
      if (value.empty() || value.size() > 15) return fail(err, 400, "invalid Content-Length");
      for (char c : value) {
        if (c < '0' || c > '9') return fail(err, 400, "invalid Content-Length");
        v = v * 10 + static_cast<uint64_t>(c - '0');
      }
      if (seen_cl && v != h.content_length) return fail(err, 400, "conflicting Content-Length");
      if (seen_cl && is_request) return fail(err, 400, "duplicate Content-Length");
      seen_cl = true;
      h.content_length = v;
    } else if (iequals(name, "transfer-encoding")) {
      if (seen_te) return fail(err, 400, "duplicate Transfer-Encoding");
      seen_te = true;
      if (!iequals(value, "chunked"))
        return fail(err, is_request ? 501 : 502, "unsupported Transfer-Encoding");
    } else if (iequals(name, "connection")) {
      h.has_connection_header = true;
      if (headerHasToken(value, "close")) h.keep_alive = false;
      if (headerHasToken(value, "keep-alive")) h.keep_alive = true;
    }
  }
  if (seen_cl && seen_te) return fail(err, 400, "both Content-Length and Transfer-Encoding");
  if (seen_te) {
    if (h.version_minor == 0) return fail(err, 400, "Transfer-Encoding on HTTP/1.0");
    h.body_kind = BodyKind::kChunked;
  } else if (seen_cl) {
    h.body_kind = h.content_length > 0 ? BodyKind::kLength : BodyKind::kNone;
  }
  return 0;
}

}  // namespace

namespace {
// ASCII lower case of eight bytes at once (bytes >= 0x80 and non-letters unchanged).
inline uint64_t lower8(uint64_t x) {
  constexpr uint64_t k7f = 0x7f7f7f7f7f7f7f7fULL, k80 = 0x8080808080808080ULL;
  const uint64_t low7 = x & k7f;
  const uint64_t ge_a = low7 + 0x0101010101010101ULL * (0x80 - 'A');  // high bit: >= 'A'
  const uint64_t gt_z = low7 + 0x0101010101010101ULL * (0x7f - 'Z');  // high bit: > 'Z'
  const uint64_t upper = (ge_a ^ gt_z) & ~x & k80;                    // ASCII 'A'..'Z'
  return x | (upper >> 2);                                            // + 0x20
}
}  // namespace

bool iequalsSameSize(std::string_view a, std::string_view b) {
  // Most calls compare different names of one size: the first byte usually tells.
  if (a.empty()) return true;
  if (lower(a[0]) != lower(b[0])) return false;
  size_t i = 0;
  for (; i + 8 <= a.size(); i += 8) {  // eight bytes a step (header names are 4-20 bytes)
    uint64_t x, y;
    std::memcpy(&x, a.data() + i, 8);
    std::memcpy(&y, b.data() + i, 8);
    if (x != y && lower8(x) != lower8(y)) return false;
  }
  for (; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

bool headerHasToken(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    size_t comma = value.find(',');
    std::string_view item = trimOws(value.substr(0, comma));
    if (iequals(item, token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

bool isHopByHop(std::string_view n) {
  switch (n.size()) {  // one comparison per header instead of seven (this runs per header, twice)
    case 2:
      return iequals(n, "te");
    case 7:
      return iequals(n, "trailer") || iequals(n, "upgrade");
    case 10:
      return iequals(n, "connection") || iequals(n, "keep-alive");
    case 16:
      return iequals(n, "proxy-connection");
    case 17:
      return iequals(n, "transfer-encoding");
    default:
      return false;
  }
}

std::string_view HeadCommon::get(std::string_view name) const {
  if (!(name_sizes & (uint64_t{1} << (name.size() & 63)))) return {};
  for (size_t i = 0; i < num_headers; ++i)
    if (iequals(headers[i].name, name)) return headers[i].value;
  return {};
}

bool HeadCommon::has(std::string_view name) const {
  if (!(name_sizes & (uint64_t{1} << (name.size() & 63)))) return false;
  for (size_t i = 0; i < num_headers; ++i)
    if (iequals(headers[i].name, name)) return true;
  return false;
}

int parseRequestHead(const char* data, size_t len, size_t max_head_bytes, RequestHead& out,
                     ParseError& err) {
  // Tolerate (skip) empty lines before the request line, as RFC 9112 §2.2 allows.
  size_t skip = 0;
  while (skip + 1 < len && data[skip] == '\r' && data[skip + 1] == '\n') skip += 2;
  size_t end = findHeadEnd(data + skip, len - skip);
  if (end == 0) {
    if (len > max_head_bytes) return fail(err, 431, "request header too large");
    if (len == skip) return 0;  // (nothing yet: memchr on an empty, possibly null, buffer is UB)
    // A bare LF inside what we have so far means a non-CRLF client: reject early.
    const char* lf = static_cast<const char*>(std::memchr(data + skip, '\n', len - skip));
    if (lf && (lf == data + skip || lf[-1] != '\r')) return fail(err, 400, "bare LF in request");
    return 0;
  }
  if (skip + end > max_head_bytes) return fail(err, 431, "request header too large");
  const char* p = data + skip;
  const char* head_end = p + end - 2;  // points at the final CRLF
  const char* eol = static_cast<const char*>(std::memchr(p, '\r', end));
  std::string_view line(p, static_cast<size_t>(eol - p));
  if (std::memchr(p, '\n', static_cast<size_t>(eol - p)))
    return fail(err, 400, "bare LF in request line");
  if (eol[1] != '\n') return fail(err, 400, "bare CR in request line");  // (RFC 9112 §2.2)
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0 || sp2 == sp1 + 1)
    return fail(err, 400, "malformed request line");
  out = RequestHead{};
  out.method = line.substr(0, sp1);
  out.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  for (unsigned char c : out.method)
    if (!kTchar[c]) return fail(err, 400, "invalid method");
  for (unsigned char c : out.target)
    if (c <= 0x20 || c >= 0x7f) return fail(err, 400, "invalid request target");
  std::string_view version = line.substr(sp2 + 1);
  if (version.substr(0, 5) == "HTTP/" && !version.starts_with("HTTP/1."))
    return fail(err, 505, "HTTP version not supported");
  if (!parseVersion(version, out.version_minor)) return fail(err, 400, "malformed HTTP version");
  out.keep_alive = out.version_minor == 1;
  const char* hp = eol + 2;
  if (parseHeaders(hp, head_end, out, err, true) < 0) {
    // A bare LF anywhere in the block is the answer, whatever else is wrong (looked for only
    // on this error path: parseHeaders refuses a bare LF as a control character anyway).
    for (const char* q = hp; q < head_end; ++q)
      if (*q == '\n' && q[-1] != '\r') return fail(err, 400, "bare LF in header");
    return -1;
  }
  int host_count = 0;
  for (size_t i = 0; i < out.num_headers; ++i) {
    if (iequals(out.headers[i].name, "host")) {
      ++host_count;
      out.host = out.headers[i].value;
    } else if (iequals(out.headers[i].name, "expect")) {
      out.expect_continue = iequals(out.headers[i].value, "100-continue");
    }
  }
  if (host_count > 1) return fail(err, 400, "duplicate Host header");
  if (host_count == 0 && out.version_minor == 1) return fail(err, 400, "missing Host header");
  out.head_bytes = skip + end;
  return static_cast<int>(out.head_bytes);
}

int parseResponseHead(const char* data, size_t len, size_t max_head_bytes,
                      std::string_view request_method, ResponseHead& out, ParseError& err) {
  size_t end = findHeadEnd(data, len);
  if (end == 0) {
    if (len > max_head_bytes) return fail(err, 502, "upstream header too large");
    return 0;
  }
  if (end > max_head_bytes) return fail(err, 502, "upstream header too large");
  const char* head_end = data + end - 2;
  const char* eol = static_cast<const char*>(std::memchr(data, '\r', end));
  std::string_view line(data, static_cast<size_t>(eol - data));
  if (eol[1] != '\n') return fail(err, 502, "malformed upstream status line");  // a bare CR
  out = ResponseHead{};
  if (line.size() < 12 || !parseVersion(line.substr(0, 8), out.version_minor) || line[8] != ' ')
    return fail(err, 502, "malformed upstream status line");
  int status = 0;
  for (int i = 9; i < 12; ++i) {
    if (line[i] < '0' || line[i] > '9') return fail(err, 502, "malformed upstream status");
    status = status * 10 + (line[i] - '0');
  }
  if (status < 100) return fail(err, 502, "malformed upstream status");
  out.status = status;
  out.reason = line.size() > 13 ? line.substr(13) : std::string_view{};
  // The reason is relayed to the client: no control bytes (a bare LF would smuggle a header
  // line past the relay's filters), HTAB and obs-text allowed (RFC 9112 §4).
  for (unsigned char c : out.reason)
    if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(err, 502, "malformed upstream reason");
  out.keep_alive = out.version_minor == 1;
  if (parseHeaders(eol + 2, head_end, out, err, false) < 0) {
    err.status = 502;
    return -1;
  }
  bool no_body =
      (status >= 100 && status < 200) || status == 204 || status == 304 || request_method == "HEAD";
  if (no_body) {
    out.body_kind = BodyKind::kNone;
  } else if (out.body_kind == BodyKind::kNone && !out.has("content-length")) {
    out.body_kind = BodyKind::kUntilClose;
    out.keep_alive = false;
  }
  std::string_view ct = out.get("content-type");
  out.event_stream = ct.size() >= 17 && iequals(ct.substr(0, 17), "text/event-stream");
  out.head_bytes = end;
  return static_cast<int>(end);
}

}  // namespace kvgate::http
