// A finished span as the OTLP exporter sends it (times in Unix nanoseconds).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "telemetry/trace_context.h"

namespace kvgate::telemetry {

using AttrValue = std::variant<std::string, int64_t, double, bool>;
// Keys are string literals (the semantic conventions' names): nothing to allocate for them.
using Attrs = std::vector<std::pair<const char*, AttrValue>>;

struct SpanEvent {
  std::string name;
  uint64_t time_ns = 0;
};

struct SpanRecord {
  // OTLP's Span.SpanKind values.
  enum class Kind : uint8_t { kInternal = 1, kServer = 2, kClient = 3 };
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_id{};  // all zero: a root span
  std::string name;
  Kind kind = Kind::kInternal;
  uint64_t start_ns = 0, end_ns = 0;
  Attrs attrs;
  std::vector<SpanEvent> events;
  bool error = false;  // status ERROR (else UNSET)
  std::string status_message;
  std::string trace_state;  // the W3C tracestate the span was in (empty: none)
};

}  // namespace kvgate::telemetry
