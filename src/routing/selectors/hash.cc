// sel 1 hash: the client's source address picks the endpoint.
//
// Algorithm: hash(source IP) modulo the pool size; an excluded endpoint passes the request to the
// next index. No load bound and no knobs: the L4 "hash" selector of the upstream gateway, applied
// per request.
#include "routing/selectors/key_selectors.h"

namespace kvgate::routing {
namespace {

class SourceHash : public Selector {
 public:
  int pick(const std::vector<PoolEndpoint>& eps, const std::vector<bool>& excluded,
           const RequestContext& ctx, PickInfo& info) override {
    size_t n = eps.size();
    info.key = "source";
    for (size_t step = 0; step < n; ++step) {
      size_t i = (ctx.source_key + step) % n;
      if (!excluded[i]) return static_cast<int>(i);
    }
    return -1;
  }
};

}  // namespace

std::unique_ptr<Selector> makeSourceHash() { return std::make_unique<SourceHash>(); }

}  // namespace kvgate::routing
