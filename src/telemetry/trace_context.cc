#include "telemetry/trace_context.h"

#include <random>

#include "common/hex.h"

namespace kvgate::telemetry {
namespace {

// Lower-case hex only (the spec's HEXDIGLC); false on anything else.
template <size_t N>
bool lowerHex(std::string_view s, std::array<uint8_t, N>& out) {
  if (s.size() != 2 * N) return false;
  std::array<uint8_t, N> v{};
  for (size_t i = 0; i < 2 * N; ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    v[i / 2] = static_cast<uint8_t>(v[i / 2] * 16 + hexDigitValue(c));
  }
  out = v;
  return true;
}

template <size_t N>
std::string hexOf(const std::array<uint8_t, N>& a) {
  return toHex(std::string_view(reinterpret_cast<const char*>(a.data()), N));
}

std::mt19937_64& rng() {
  thread_local std::mt19937_64 g{[] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }()};
  return g;
}

template <size_t N>
std::array<uint8_t, N> randomId() {
  std::array<uint8_t, N> a{};
  do {
    for (size_t i = 0; i < N; i += 8) {
      const uint64_t r = rng()();
      for (size_t k = 0; k < 8 && i + k < N; ++k) a[i + k] = static_cast<uint8_t>(r >> (8 * k));
    }
  } while (isZero(a));
  return a;
}

}  // namespace

bool isZero(const TraceId& t) {
  for (uint8_t b : t)
    if (b) return false;
  return true;
}
bool isZero(const SpanId& s) {
  for (uint8_t b : s)
    if (b) return false;
  return true;
}

bool parseTraceParent(std::string_view h, TraceParent& out) {
  // Optional whitespace around a header value is the HTTP parser's to strip; here it is invalid.
  if (h.size() < 55) return false;
  std::array<uint8_t, 1> version{}, flags{};
  if (!lowerHex(h.substr(0, 2), version) || version[0] == 0xff) return false;
  if (version[0] == 0 && h.size() != 55) return false;
  if (h.size() > 55 && h[55] != '-') return false;  // a later version's extra fields
  if (h[2] != '-' || h[35] != '-' || h[52] != '-') return false;
  TraceParent p;
  if (!lowerHex(h.substr(3, 32), p.trace_id) || !lowerHex(h.substr(36, 16), p.parent_id) ||
      !lowerHex(h.substr(53, 2), flags))
    return false;
  if (isZero(p.trace_id) || isZero(p.parent_id)) return false;
  p.flags = flags[0];
  out = p;
  return true;
}

std::string formatTraceParent(const TraceId& trace, const SpanId& span, bool sampled) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(55, '-');
  out[0] = out[1] = '0';
  for (size_t i = 0; i < 16; ++i) {
    out[3 + 2 * i] = kDigits[trace[i] >> 4];
    out[4 + 2 * i] = kDigits[trace[i] & 15];
  }
  for (size_t i = 0; i < 8; ++i) {
    out[36 + 2 * i] = kDigits[span[i] >> 4];
    out[37 + 2 * i] = kDigits[span[i] & 15];
  }
  out[53] = '0';
  out[54] = sampled ? '1' : '0';
  return out;
}

bool acceptableTraceState(std::string_view v) {
  if (v.empty() || v.size() > 512) return false;
  for (unsigned char c : v)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

TraceId newTraceId() { return randomId<16>(); }
SpanId newSpanId() { return randomId<8>(); }

bool sampleRatio(const TraceId& t, double ratio) {
  if (ratio <= 0) return false;
  if (ratio >= 1) return true;
  uint64_t r = 0;  // the rightmost 7 bytes, big-endian: W3C level 2's random part
  for (size_t i = 9; i < 16; ++i) r = (r << 8) | t[i];
  // Sampled when R >= T, the rejection threshold T = (1 - ratio) x 2^56 (OpenTelemetry's
  // probability sampling over W3C Trace Context level 2, specification PR #3910), so a
  // collector's or an engine's sampler of a lower ratio keeps a subset of what is sent.
  return static_cast<double>(r) >= (1.0 - ratio) * 72057594037927936.0;  // 2^56
}

std::string hex(const TraceId& t) { return hexOf(t); }
std::string hex(const SpanId& s) { return hexOf(s); }

}  // namespace kvgate::telemetry
