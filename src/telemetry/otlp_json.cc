// Written straight into one string (no JSON DOM: this runs for every batch of sampled spans, and
// a DOM cost several times the rest of a traced request). Strings are escaped with non-ASCII as
// \uXXXX (an invalid UTF-8 byte as U+FFFD), so any client-chosen value is valid JSON.
#include "telemetry/otlp_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "common/json_escape.h"

namespace kvgate::telemetry {
namespace {

// Plain visible ASCII (no quote or backslash) is copied as one run; the rest goes through the
// shared escaper from the first byte that needs it.
void str(std::string& out, std::string_view s) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') break;
    ++i;
  }
  out.append(s.data(), i);
  if (i < s.size()) appendJsonEscaped(out, s.substr(i), /*ensure_ascii=*/true);
  out += '"';
}

template <size_t N>
void hexId(std::string& out, const std::array<uint8_t, N>& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  char b[2 * N];
  for (size_t i = 0; i < N; ++i) {
    b[2 * i] = kDigits[id[i] >> 4];
    b[2 * i + 1] = kDigits[id[i] & 15];
  }
  out += '"';
  out.append(b, 2 * N);
  out += '"';
}

template <typename T>
void quotedInt(std::string& out, T v) {  // as a JSON string: OTLP's 64-bit integers
  char b[24];
  const auto r = std::to_chars(b, b + sizeof b, v);
  out += '"';
  out.append(b, static_cast<size_t>(r.ptr - b));
  out += '"';
}

void anyValue(std::string& out, const AttrValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) {
    out += "{\"stringValue\":";
    str(out, *s);
  } else if (const auto* i = std::get_if<int64_t>(&v)) {
    out += "{\"intValue\":";
    quotedInt(out, *i);
  } else if (const auto* d = std::get_if<double>(&v)) {
    if (!std::isfinite(*d)) {
      out += "{\"stringValue\":\"" + std::string(std::isnan(*d) ? "NaN" : *d > 0 ? "Infinity" : "-Infinity") + "\"";
    } else {
      char b[32];
      std::snprintf(b, sizeof b, "%.17g", *d);
      out += "{\"doubleValue\":";
      out += b;
    }
  } else {
    out += std::get<bool>(v) ? "{\"boolValue\":true" : "{\"boolValue\":false";
  }
  out += '}';
}

void attributes(std::string& out, const Attrs& a) {
  out += '[';
  for (size_t i = 0; i < a.size(); ++i) {
    if (i) out += ',';
    out += "{\"key\":";
    str(out, a[i].first);
    out += ",\"value\":";
    anyValue(out, a[i].second);
    out += '}';
  }
  out += ']';
}

}  // namespace

std::string encodeOtlpJson(const std::vector<SpanRecord>& spans, const std::string& service,
                           const std::string& version) {
  std::string out;
  out.reserve(256 + spans.size() * 512);
  out += "{\"resourceSpans\":[{\"resource\":{\"attributes\":";
  attributes(out, {{"service.name", service}, {"service.version", version}});
  out += "},\"scopeSpans\":[{\"scope\":{\"name\":\"kvgate\",\"version\":";
  str(out, version);
  out += "},\"spans\":[";
  for (size_t i = 0; i < spans.size(); ++i) {
    const SpanRecord& s = spans[i];
    if (i) out += ',';
    out += "{\"traceId\":";
    hexId(out, s.trace_id);
    out += ",\"spanId\":";
    hexId(out, s.span_id);
    if (!s.trace_state.empty()) {
      out += ",\"traceState\":";
      str(out, s.trace_state);
    }
    if (!isZero(s.parent_id)) {
      out += ",\"parentSpanId\":";
      hexId(out, s.parent_id);
    }
    out += ",\"name\":";
    str(out, s.name);
    out += ",\"kind\":";
    out += static_cast<char>('0' + static_cast<int>(s.kind));
    out += ",\"startTimeUnixNano\":";
    quotedInt(out, s.start_ns);
    out += ",\"endTimeUnixNano\":";
    quotedInt(out, s.end_ns);
    out += ",\"attributes\":";
    attributes(out, s.attrs);
    if (!s.events.empty()) {
      out += ",\"events\":[";
      for (size_t e = 0; e < s.events.size(); ++e) {
        if (e) out += ',';
        out += "{\"timeUnixNano\":";
        quotedInt(out, s.events[e].time_ns);
        out += ",\"name\":";
        str(out, s.events[e].name);
        out += '}';
      }
      out += ']';
    }
    out += ",\"status\":{";
    if (s.error) {
      out += "\"code\":2";  // STATUS_CODE_ERROR
      if (!s.status_message.empty()) {
        out += ",\"message\":";
        str(out, s.status_message);
      }
    }
    out += "}}";
  }
  out += "]}]}]}";
  return out;
}

}  // namespace kvgate::telemetry
