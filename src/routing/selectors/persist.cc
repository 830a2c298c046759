// sel 3 persist: session stickiness on a consistent-hash ring.
//
// Algorithm: the session value named by `session_header_name` (a header name, `cookie:NAME` or
// `query:NAME`; the source IP when it is empty or the request lacks the value) is hashed onto a
// ring of 256 points per endpoint; the first endpoint clockwise that is not excluded serves it.
// No load bound: stickiness wins over balance. A pool change moves only the sessions of the
// endpoints that changed. Knob: session_header_name.
#include "routing/selectors/hash_ring.h"
#include "routing/selectors/key_selectors.h"

namespace kvgate::routing {
namespace {

class Persist : public Selector {
 public:
  explicit Persist(const std::vector<PoolEndpoint>& eps)
      : ring_(eps, std::vector<int>(eps.size(), 256)) {}
  int pick(const std::vector<PoolEndpoint>& eps, const std::vector<bool>& excluded,
           const RequestContext& ctx, PickInfo& info) override {
    if (ring_.size() == 0) return -1;
    uint64_t key = ctx.session_key ? *ctx.session_key : ctx.source_key;
    info.key = ctx.session_key ? "session" : "source";
    size_t start = ring_.lowerBound(key);
    for (size_t step = 0; step < ring_.size(); ++step) {
      int i = ring_.endpointAt(start + step);
      if (!excluded[static_cast<size_t>(i)]) return i;
    }
    return -1;
  }

 private:
  HashRing ring_;
};

}  // namespace

std::unique_ptr<Selector> makePersist(const std::vector<PoolEndpoint>& eps) {
  return std::make_unique<Persist>(eps);
}

}  // namespace kvgate::routing
