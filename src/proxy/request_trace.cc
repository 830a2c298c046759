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
  // (a repeated traceparent is invalid: the spec's rule, a new trace starts; repeated tracestate
  // headers are one list, joined with commas)
  size_t count = 0;
  std::string_view value;
  for (size_t i = 0; i < head.num_headers; ++i)
    if (http::iequals(head.headers[i].name, "traceparent")) {
      ++count;
      value = head.headers[i].value;
    }
  telemetry::TraceParent p;
  if (count == 1 && telemetry::parseTraceParent(value, p)) {
    trace = p.trace_id;
    parent = p.parent_id;
    on = p.sampled();
    propagate = on;  // (an unsampled valid parent is passed on as the client sent it)
    if (on) {
      for (size_t i = 0; i < head.num_headers; ++i)
        if (http::iequals(head.headers[i].name, "tracestate")) {
          if (!state.empty()) state += ',';
          state.append(head.headers[i].value);
          if (state.size() > 513) break;
        }
      if (!telemetry::acceptableTraceState(state)) state.clear();
    }
  } else {
    trace = telemetry::newTraceId();
    parent = telemetry::SpanId{};
    on = telemetry::sampleRatio(trace, ratio);
    propagate = true;
  }
  if (on) {
    server = telemetry::newSpanId();
    rename(head.method, head.target);
  }
}

void RequestTrace::rename(std::string_view method, std::string_view target) {
  if (!on) return;
  // (client-chosen: bounded; the query is left out, it may carry secrets)
  const std::string_view path = target.substr(0, target.find('?'));
  name.assign(method.substr(0, 16)).append(" ").append(path.substr(0, 128));
}

std::string RequestTrace::legHeaders(const char* role, Clock::time_point now) {
  if (!propagate) return {};
  telemetry::SpanId id = telemetry::newSpanId();
  if (on) {
    if (legs.size() < kMaxLegs)
      legs.push_back(Leg{id, role, nullptr, now, {}, 0});
    else
      id = legs.back().id;
  }
  std::string h;
  h.reserve(72 + state.size() + 14);
  h.append("traceparent: ").append(telemetry::formatTraceParent(trace, id, on)).append("\r\n");
  if (!state.empty()) h.append("tracestate: ").append(state).append("\r\n");
  return h;
}

void RequestTrace::attempt(std::string& head, const std::string* endpoint, Clock::time_point now) {
  if (!on || legs.empty()) return;
  Leg& last = legs.back();
  if (last.endpoint == nullptr) {  // the head's first send
    last.endpoint = endpoint;
    last.start = now;
    return;
  }
  if (legs.size() >= kMaxLegs) return;
  // A resend of this head: a span of its own, named in the head (the span id's 16 digits follow
  // "traceparent: 00-" and the 32 of the trace id and a dash).
  static constexpr std::string_view kField = "\ntraceparent: 00-";
  const size_t at = head.find(kField);
  if (at == std::string::npos || at + kField.size() + 33 + 16 > head.size()) return;
  Leg next{telemetry::newSpanId(), last.role, endpoint, now, {}, 0};
  const std::string tp = telemetry::formatTraceParent(trace, next.id, true);
  head.replace(at + kField.size() + 33, 16, tp, 36, 16);
  legs.push_back(next);
}

void RequestTrace::attemptEnded(Clock::time_point now, int status) {
  if (!on || legs.empty()) return;
  Leg& last = legs.back();
  if (last.end == Clock::time_point{}) {
    last.end = now;
    last.status = status;
  }
}

void RequestTrace::legEnded(const char* role, Clock::time_point now, int status) {
  if (!on) return;
  for (auto it = legs.rbegin(); it != legs.rend(); ++it)
    if (std::string_view(it->role) == role) {
      if (it->end == Clock::time_point{}) {
        it->end = now;
        it->status = status;
      }
      return;
    }
}

}  // namespace kvgate::proxy
