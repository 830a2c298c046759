// Response filter `usage_strip` (response_filter.h): a metered stream the gateway asked usage for
// on the client's behalf (stream_options.include_usage added to the body: quota.inject) goes to
// the client without that usage event, as the client asked for it; the rest of each event is
// unchanged (governance::SseUsageFilter, bounded). The only rewriting filter: the relay re-frames
// its output (no Content-Length; chunked to an HTTP/1.1 client, until close to an HTTP/1.0 one,
// DATA to a stream). Runs on a successful (< 300) event stream with a body, when the usage filter
// runs too. State: RequestCtx::usage_filter.
#include "proxy/filters/response_filter.h"

namespace kvgate::proxy {
namespace {

class UsageStrip final : public ResponseFilter {
 public:
  const char* name() const override { return "usage_strip"; }
  bool begin(const ResponseEnv& e) const override {
    return usageScanFilter().begin(e) && e.rq.quota.inject && e.rh.event_stream &&
           e.rh.status < 300 && e.rh.body_kind != http::BodyKind::kNone;
  }
  bool payload(const ResponseEnv& e, std::string_view piece, std::string* out) const override {
    e.rq.usage_filter.feed(piece, *out);
    return true;
  }
  bool rewrites() const override { return true; }
  void finish(const ResponseEnv& e, std::string& out) const override {
    e.rq.usage_filter.finish(out);
  }
};

}  // namespace

const ResponseFilter& usageStripFilter() {
  static const UsageStrip f;
  return f;
}

}  // namespace kvgate::proxy
