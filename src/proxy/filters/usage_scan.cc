// Response filter `usage` (response_filter.h): the engine's usage ({"usage": ...} of a JSON answer
// or of an event stream's events) read from the payload as it passes, for the quota
// settlement (quota.h) and a sampled trace's gen_ai.usage.* (request_trace.h). Runs when the
// request holds a quota reservation or is traced, on any answer with a body (a HEAD answer has
// none). State: RequestCtx::usage.
#include "proxy/filters/response_filter.h"

namespace kvgate::proxy {
namespace {

class UsageScan final : public ResponseFilter {
 public:
  const char* name() const override { return "usage"; }
  bool begin(const ResponseEnv& e) const override {
    return (e.rq.quota.active || e.rq.trace.on) && !e.head_request;
  }
  bool payload(const ResponseEnv& e, std::string_view piece, std::string*) const override {
    e.rq.usage.feed(piece);
    return true;
  }
};

}  // namespace

const ResponseFilter& usageScanFilter() {
  static const UsageScan f;
  return f;
}

}  // namespace kvgate::proxy
