// Endpoint selectors of a single pool (the rule's `sel`), pure decisions over plain data.
//
//   0 rr   round-robin: an atomic cursor modulo the pool size; excluded endpoints are skipped.
//   2 wrr  weighted round-robin: a smooth interleaved schedule (nginx's smooth WRR, computed
//          once per snapshot) walked by an atomic cursor; weight 0 takes no traffic unless
//          every weight is 0 (then all count as 1).
//   4 lc   least connections: the lowest in-flight count (this gateway's view), ties broken
//          round-robin so equal endpoints share the load.
// Knobs: none beyond the endpoint weights. The key-based selectors (1 hash, 3 persist, 8 chwbl,
// 9 gpuaware, 10 wrr-hash) have their own files, each opening with its algorithm and knobs.
#pragma once
#include <atomic>
#include <memory>
#include <vector>

#include "endpoints/endpoint.h"
#include "routing/request_context.h"

namespace kvgate::routing {

struct PoolEndpoint {
  std::shared_ptr<endpoints::EndpointState> state;
  uint8_t weight = 1;
  int role = 0;
};

class Selector {
 public:
  virtual ~Selector() = default;
  // Index of the chosen endpoint, or -1 when every endpoint is excluded. `excluded` has one
  // entry per endpoint (true = skip: failed this request already, or unhealthy).
  virtual int pick(const std::vector<PoolEndpoint>& eps, const std::vector<bool>& excluded,
                   const RequestContext& ctx, PickInfo& info) = 0;
  int pick(const std::vector<PoolEndpoint>& eps, const std::vector<bool>& excluded) {
    PickInfo info;
    return pick(eps, excluded, RequestContext{}, info);
  }
  // Selector for a rule's `sel`; nullptr for selectors this build does not implement.
  static std::unique_ptr<Selector> create(int sel, const std::vector<PoolEndpoint>& eps);
};

// Smooth weighted round-robin order for the given weights (length = sum of effective weights).
std::vector<int> smoothWrrSchedule(const std::vector<int>& weights);

}  // namespace kvgate::routing
