// A sampled request's spans, built when it ends (request_trace.h says which and why).
#include "proxy/exchange.h"
#include "telemetry/tracer.h"

namespace kvgate::proxy {

void Exchange::finishTrace() {
  RequestTrace& t = rq_.trace;
  if (!t.on || !w_.opts.tracer) return;
  t.on = false;  // (once)
  using telemetry::SpanRecord;
  const auto now = std::chrono::steady_clock::now();
  const Route* route = rq_.outcome.route;
  std::vector<SpanRecord> spans;
  spans.reserve(3 + t.legs.size());
  auto child = [&](const char* name, SpanRecord::Kind kind, telemetry::SpanId id,
                   RequestTrace::Clock::time_point from, RequestTrace::Clock::time_point to) {
    SpanRecord s;
    s.trace_id = t.trace;
    s.span_id = id;
    s.parent_id = t.server;
    s.name = name;
    s.kind = kind;
    s.start_ns = t.unixNs(from);
    s.end_ns = t.unixNs(std::max(from, to));
    s.trace_state = t.state;
    return s;
  };
  const std::string rule = !route                     ? std::string()
                           : route->rule.name.empty() ? route->rule.key()
                                                      : route->rule.name;
  // The server span.
  SpanRecord server = child(t.name.c_str(), SpanRecord::Kind::kServer, t.server, t.t0, now);
  server.parent_id = t.parent;
  server.attrs.reserve(12);
  const auto slash = t.name.find(' ');
  server.attrs.emplace_back("http.request.method", t.name.substr(0, slash));
  server.attrs.emplace_back("url.path", slash == std::string::npos ? "" : t.name.substr(slash + 1));
  server.attrs.emplace_back("http.response.status_code", int64_t{rq_.outcome.status});
  server.attrs.emplace_back("kvgate.request_id", rq_.request_id);
  if (!rule.empty()) server.attrs.emplace_back("kvgate.rule", rule);
  if (!rq_.outcome.model.empty())  // (client-chosen: bounded)
    server.attrs.emplace_back("gen_ai.request.model",
                              std::string(rq_.outcome.model.substr(0, 256)));
  if (const auto& u = rq_.usage.usage(); u) {
    if (u->prompt_tokens >= 0)
      server.attrs.emplace_back("gen_ai.usage.input_tokens", u->prompt_tokens);
    if (u->completion_tokens >= 0)
      server.attrs.emplace_back("gen_ai.usage.output_tokens", u->completion_tokens);
  }
  if (!rq_.outcome.tenant.empty()) server.attrs.emplace_back("kvgate.tenant", rq_.outcome.tenant);
  if (rq_.outcome.ttfb_ms >= 0) {
    // (a stream's first event; a whole answer's first byte comes when generation is done)
    server.events.push_back({t.event_stream ? "first_token" : "first_byte",
                             t.start_unix_ns + static_cast<uint64_t>(rq_.outcome.ttfb_ms * 1e6)});
  }
  if (rq_.outcome.status >= 500 || rq_.outcome.status == 0 || client_gone_ || relay_cut_) {
    server.error = true;
    server.status_message = rq_.outcome.status == 0 || client_gone_
                                ? "cancelled: the client left before the answer ended"
                            : relay_cut_ ? "the engine's answer was cut off"
                                         : "status " + std::to_string(rq_.outcome.status);
  }
  spans.push_back(std::move(server));
  // The gates.
  if (t.gates_start != RequestTrace::Clock::time_point{}) {
    const auto end = t.gates_end == RequestTrace::Clock::time_point{} ? now : t.gates_end;
    SpanRecord g = child("gates", SpanRecord::Kind::kInternal, telemetry::newSpanId(),
                         t.gates_start, end);
    g.attrs.emplace_back("kvgate.gates", t.gates);
    if (rq_.outcome.denied) {
      g.error = true;
      g.status_message = "refused: status " + std::to_string(rq_.outcome.status);
    }
    spans.push_back(std::move(g));
  }
  // The routing decision.
  if (t.routed != RequestTrace::Clock::time_point{}) {
    const auto from = t.gates_end != RequestTrace::Clock::time_point{} ? t.gates_end : t.t0;
    SpanRecord r = child("route", SpanRecord::Kind::kInternal, telemetry::newSpanId(),
                         std::min(from, t.routed), t.routed);
    r.attrs.reserve(6);
    r.attrs.emplace_back("kvgate.tier", std::string(rq_.outcome.stage));
    r.attrs.emplace_back("kvgate.key", std::string(rq_.outcome.key));
    r.attrs.emplace_back("kvgate.spill", rq_.outcome.spilled);
    if (rq_.outcome.matched_blocks >= 0)
      r.attrs.emplace_back("kvgate.matched_blocks", int64_t{rq_.outcome.matched_blocks});
    if (rq_.outcome.endpoint) r.attrs.emplace_back("kvgate.endpoint", *rq_.outcome.endpoint);
    if (rq_.outcome.prefill) r.attrs.emplace_back("kvgate.prefill_endpoint", *rq_.outcome.prefill);
    spans.push_back(std::move(r));
  }
  // Each attempt at an upstream leg that was sent: from its send (not before the decision) to
  // its end, or the request's.
  for (const auto& leg : t.legs) {
    if (!leg.endpoint) continue;
    const auto from = std::max(leg.start, t.routed);
    const auto to = leg.end == RequestTrace::Clock::time_point{} ? now : leg.end;
    SpanRecord l = child("upstream", SpanRecord::Kind::kClient, leg.id, from, to);
    l.attrs.reserve(3);
    if (*leg.role) l.attrs.emplace_back("kvgate.leg", std::string(leg.role));
    l.attrs.emplace_back("server.address", *leg.endpoint);
    const bool open = leg.end == RequestTrace::Clock::time_point{};
    // (the request's last leg answered with the request's status)
    const int status = leg.status != 0 ? leg.status
                       : open && &leg == &t.legs.back() && rq_.outcome.engine_answered
                           ? rq_.outcome.status
                           : 0;
    if (status != 0) l.attrs.emplace_back("http.response.status_code", int64_t{status});
    if (status >= 500 || (!open && status == 0)) {
      l.error = true;
      l.status_message = status ? "status " + std::to_string(status) : "no answer";
    }
    spans.push_back(std::move(l));
  }
  t.legs.clear();
  w_.opts.tracer->offer(std::move(spans));
}

}  // namespace kvgate::proxy
