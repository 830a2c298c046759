// RequestTrace: one request's OpenTelemetry trace (serve --otlp-endpoint; telemetry/tracer.h).
//
// At dispatch, start() reads the client's W3C traceparent/tracestate (or starts a trace) and
// samples it (ParentBased(TraceIdRatioBased)). A sampled request gets, when it ends, one server
// span ("<METHOD> <path>") with child spans:
//   gates     the rule's request filters that ran (credentials, quota): kvgate.gates names them
//   route     from the filters' end to the routing decision: kvgate.tier, kvgate.key,
//             kvgate.spill, kvgate.endpoint (and kvgate.prefill_endpoint on P/D rules)
//   upstream  one per upstream leg (a client span; kvgate.leg prefill/decode on P/D rules), the
//             span whose id the engine receives in its traceparent
// and, on the server span, the event first_token (the first response byte; a stream's first
// event) and the request's attributes: http.request.method, url.path, http.response.status_code,
// gen_ai.request.model, gen_ai.usage.input_tokens / output_tokens (when the answer's usage was
// read), kvgate.request_id, kvgate.rule. The span ends when the answer (a stream: its last
// event) is relayed. Without a tracer nothing is read or written: the client's trace headers reach
// the engine as sent. With one, an unsampled request records nothing but its legs still carry
// our traceparent (flags 00), so an engine follows the gateway's sampling decision, unless the
// client sent one valid unsampled parent, which is passed on as sent.
#pragma once
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/span.h"
#include "telemetry/trace_context.h"

namespace kvgate::http {
struct RequestHead;
}

namespace kvgate::proxy {

struct RequestTrace {
  using Clock = std::chrono::steady_clock;
  // One attempt at an upstream leg: its span is the parent the engine receives.
  struct Leg {
    telemetry::SpanId id{};
    const char* role = "";                  // "", "prefill", "decode"
    const std::string* endpoint = nullptr;  // set when sent (null: never sent, no span)
    Clock::time_point start{}, end{};       // end zero: open until the request ends
    int status = 0;                         // the engine's answer status (0: none)
  };
  static constexpr size_t kMaxLegs = 16;  // attempts past it share the last span

  // A tracer exists: every leg carries our traceparent (the client's trace headers replaced),
  // sampled or not, unless the client sent one valid unsampled parent (passed on as sent).
  bool propagate = false;
  bool on = false;  // sampled: spans are recorded and sent
  bool event_stream = false;  // the answer relayed is an event stream
  telemetry::TraceId trace{};
  telemetry::SpanId server{};
  telemetry::SpanId parent{};  // the client's span (zero: we started the trace)
  std::string state;           // tracestate passed on
  std::string name;            // the server span's: "<METHOD> <path>" (bounded)
  std::string gates;           // the filters that ran, comma-separated (the gates span's)
  uint64_t start_unix_ns = 0;
  Clock::time_point t0{}, gates_start{}, gates_end{}, routed{};
  std::vector<Leg> legs;

  void reset() {
    propagate = on = event_stream = false;
    state.clear();
    name.clear();
    gates.clear();
    legs.clear();
    gates_start = gates_end = routed = Clock::time_point{};
  }
  // Reads the head's trace context and decides sampling; `t0` is when the head arrived.
  void start(const http::RequestHead& head, double ratio, Clock::time_point t0);
  // The server span's name from the target as forwarded (after normalization).
  void rename(std::string_view method, std::string_view target);
  // A new upstream leg's head is being written: the header lines to add to it
  // ("traceparent: ...\r\n" and the tracestate), naming a new leg span (sampled) or a span of no
  // record (flags 00).
  std::string legHeaders(const char* role, Clock::time_point now);
  // The leg whose head is `head` is sent to `endpoint` now. A resend of the same head (to another
  // endpoint) is a new attempt: a new span, its id written into the head's traceparent.
  void attempt(std::string& head, const std::string* endpoint, Clock::time_point now);
  // The last attempt ended at `now` with the engine's `status` (0: none).
  void attemptEnded(Clock::time_point now, int status);
  // The last leg of `role` ended at `now` (a P/D prefill before its decode leg starts).
  void legEnded(const char* role, Clock::time_point now, int status = 0);
  // Filter `name` ran; the gates span starts at `t0` (before the first filter).
  void gateRan(std::string_view filter, Clock::time_point t0) {
    if (gates_start == Clock::time_point{}) gates_start = t0;
    if (!gates.empty()) gates += ',';
    gates.append(filter);
  }
  void markRouted(Clock::time_point now) {
    if (on && routed == Clock::time_point{}) routed = now;
  }
  uint64_t unixNs(Clock::time_point t) const {
    return start_unix_ns + static_cast<uint64_t>(std::max<int64_t>(
                               0, std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0)
                                      .count()));
  }
};

// Header names the trace owns on an upstream leg when it propagates (the client's are replaced by
// the leg's own).
bool isTraceHeader(std::string_view name);

}  // namespace kvgate::proxy
