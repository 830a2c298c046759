// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` header read from a
// client or started here, the ids of our spans, and the sampling decision.
//
// traceparent = version "-" trace-id "-" parent-id "-" trace-flags, lower-case hex:
//   version 2 digits (not "ff"; version 00 is exactly 55 characters; a higher version may carry
//   more after a "-", which is ignored), trace-id 32 digits not all zero, parent-id 16 digits not
//   all zero, flags 2 digits (bit 0: sampled). Anything else is invalid and a new trace starts
//   (the spec's rule), so a hostile header can neither break the request nor pick our ids.
// tracestate is passed on as the client sent it when it is at most 512 bytes of visible ASCII
// (the spec's lower bound a vendor must propagate), else dropped.
// Sampling (OpenTelemetry's ParentBased(TraceIdRatioBased)): a request with a valid parent
// follows the parent's sampled flag; a new trace is sampled when the rightmost 56 bits of its
// trace id (W3C level 2's random part), as a number R, reach the rejection threshold
// T = (1 - ratio) x 2^56 (OpenTelemetry's consistent probability sampling: R >= T).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate::telemetry {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

struct TraceParent {
  TraceId trace_id{};
  SpanId parent_id{};
  uint8_t flags = 0;
  bool sampled() const { return flags & 1; }
};

// False (and `out` untouched) when `header` is not a valid traceparent.
bool parseTraceParent(std::string_view header, TraceParent& out);
// "00-<trace>-<span>-<flags>" (55 characters).
std::string formatTraceParent(const TraceId& trace, const SpanId& span, bool sampled);
// True when `v` may be passed on as tracestate.
bool acceptableTraceState(std::string_view v);

// Random ids from a per-thread generator, never all zero.
TraceId newTraceId();
SpanId newSpanId();
bool isZero(const TraceId& t);
bool isZero(const SpanId& s);

// The ratio sampler's decision for a new trace; ratio <= 0 never, >= 1 always.
bool sampleRatio(const TraceId& t, double ratio);

std::string hex(const TraceId& t);
std::string hex(const SpanId& s);

}  // namespace kvgate::telemetry
