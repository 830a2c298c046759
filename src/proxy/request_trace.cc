#include "proxy/request_trace.h"

#include "http/parser.h"

namespace kvgate::proxy {

bool isTraceHeader(std::string_view name) {
  return http::iequals(name, "traceparent") || http::iequals(name, "tracestate");
}

void RequestTrace::start(const http::RequestHead& head, double ratio, Clock::time_point at) {
  reset();
  t0 = at;
  start_unix_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::system_clock::now().time_since_epoch() - (Clock::now() - at))
          .count());
  telemetry::TraceParent p;
  // (a repeated traceparent is invalid: the spec's rule, a new trace starts)
  size_t count = 0;
  std::string_view value;
  for (size_t i = 0; i < head.num_headers; ++i)
    if (http::iequals(head.headers[i].name, "traceparent")) {
      ++count;
      value = head.headers[i].value;
    }
  if (count == 1 && telemetry::parseTraceParent(value, p)) {
    on = p.sampled();
    trace = p.trace_id;
    parent = p.parent_id;
    const std::string_view ts = head.get("tracestate");
    if (on && telemetry::acceptableTraceState(ts)) state.assign(ts);
  } else {
    trace = telemetry::newTraceId();
    parent = telemetry::SpanId{};
    on = telemetry::sampleRatio(trace, ratio);
  }
  if (!on) return;
  server = telemetry::newSpanId();
  // (client-chosen: bounded; the query is left out, it may carry secrets)
  const std::string_view path = head.target.substr(0, head.target.find('?'));
  name.assign(head.method).append(" ").append(path.substr(0, 128));
}

std::string RequestTrace::legHeaders(const char* role, Clock::time_point now) {
  if (!on) return {};
  if (legs.size() < kMaxLegs) legs.push_back(Leg{telemetry::newSpanId(), role, now, {}});
  const Leg& l = legs.back();
  std::string h;
  h.reserve(72 + state.size() + 14);
  h.append("traceparent: ").append(telemetry::formatTraceParent(trace, l.id, true)).append("\r\n");
  if (!state.empty()) h.append("tracestate: ").append(state).append("\r\n");
  return h;
}

void RequestTrace::legEnded(const char* role, Clock::time_point now) {
  if (!on) return;
  for (auto it = legs.rbegin(); it != legs.rend(); ++it)
    if (std::string_view(it->role) == role) {
      if (it->end == Clock::time_point{}) it->end = now;
      return;
    }
}

}  // namespace kvgate::proxy
