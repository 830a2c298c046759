// Response filter `response_id` (response_filter.h): a Responses API answer's id, read from its
// first 4 KiB, is remembered with the endpoint that answered and the principal that asked
// (response_homes.h), so a later request continuing it (previous_response_id) is pinned there
// (forward.cc). Runs on a successful (2xx) answer with a body on a rule that keeps homes; needs no
// more once the id is found or 4 KiB passed without one. State: RequestCtx::response_probe,
// response_id_seen.
#include "proxy/filters/response_filter.h"
#include "proxy/response_homes.h"
#include "proxy/rule_stats.h"

namespace kvgate::proxy {
namespace {

constexpr size_t kProbeBytes = 4096;

class ResponseId final : public ResponseFilter {
 public:
  const char* name() const override { return "response_id"; }
  bool begin(const ResponseEnv& e) const override {
    return e.rq.api == Api::kResponses && e.rh.status >= 200 && e.rh.status < 300 &&
           !e.head_request && e.route.stats->response_homes;
  }
  bool payload(const ResponseEnv& e, std::string_view piece, std::string*) const override {
    RequestCtx& rq = e.rq;
    if (rq.response_id_seen) return false;
    std::string& probe = rq.response_probe;
    probe.append(piece.substr(0, kProbeBytes - std::min(probe.size(), kProbeBytes)));
    const std::string_view id = responseIdIn(probe);
    if (!id.empty() && rq.outcome.endpoint) {
      if (e.route.stats->response_homes->remember(id, *rq.outcome.endpoint, rq.responseOwner()))
        e.route.stats->response_pins[0].fetch_add(1, std::memory_order_relaxed);
      rq.response_id_seen = true;
    } else if (probe.size() >= kProbeBytes) {
      rq.response_id_seen = true;  // (none in the first 4 KiB: not looked for any more)
    }
    if (rq.response_id_seen) std::string().swap(probe);
    return !rq.response_id_seen;
  }
};

}  // namespace

const ResponseFilter& responseIdFilter() {
  static const ResponseId f;
  return f;
}

}  // namespace kvgate::proxy
