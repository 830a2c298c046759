#include "endpoints/endpoint_table.h"

namespace kvgate::endpoints {

std::shared_ptr<EndpointState> EndpointTable::acquire(const std::string& ip, uint16_t port) {
  auto& slot = states_[key(ip, port)];
  if (!slot) slot = std::make_shared<EndpointState>(next_id_++, ip, port, clock_);
  return slot;
}

std::vector<EndpointId> EndpointTable::retainOnly(const std::set<std::string>& live) {
  std::vector<EndpointId> dropped;
  for (auto it = states_.begin(); it != states_.end();) {
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    dropped.push_back(it->second->id);
    it = states_.erase(it);
  }
  return dropped;
}

}  // namespace kvgate::endpoints
