// EndpointTable: the one registry of upstream endpoints and their stable identities.
//
// Every upstream endpoint (ip, port) gets one EndpointState with an EndpointId that health, the
// breaker, the connection pools, metrics and (later) the KV index share, independent of any
// rule's vector indices. Ids are never reused: an endpoint that is removed from every rule is
// dropped at once (metrics, prober, pools forget it) and, if added again later, starts fresh
// with a new id, a closed breaker and no down mark. In-flight requests keep the state they hold
// (shared_ptr) until they finish. Control thread only.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "endpoints/endpoint.h"

namespace kvgate::endpoints {

class EndpointTable {
 public:
  explicit EndpointTable(const common::Clock& clock) : clock_(clock) {}
  // The live state of (ip, port), created with a new id when the table does not hold it.
  std::shared_ptr<EndpointState> acquire(const std::string& ip, uint16_t port);
  // Drops every endpoint whose key (see key()) is not in `live`; returns the dropped ids.
  std::vector<EndpointId> retainOnly(const std::set<std::string>& live);
  static std::string key(const std::string& ip, uint16_t port) {
    return ip + "|" + std::to_string(port);
  }
  const std::map<std::string, std::shared_ptr<EndpointState>>& all() const { return states_; }

 private:
  const common::Clock& clock_;
  EndpointId next_id_ = 1;
  std::map<std::string, std::shared_ptr<EndpointState>> states_;  // by key()
};

}  // namespace kvgate::endpoints
