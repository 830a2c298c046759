// The L4 data path's control plane (issue 33): loads the tc program (bpf/l4_lb.bpf.c, built into
// the binary as a libbpf skeleton), attaches it at tc ingress of each interface `serve
// --l4-ifaces` names, and programs its maps from the rule set on every commit: the program is
// never reloaded for a rule change, and a flow keeps its endpoint while it lives.
//
// Served: mode 0 (DNAT) for tcp and udp, sel 0 (round-robin), 1 (hash of the client's address
// and port) and 2 (weighted round-robin by the endpoints' weights), inactiveTimeOut as the flows'
// idle timeout (default 120 s tcp, 30 s udp). Bounds: 1,024 services of at most 64 endpoints;
// 262,144 tracked flows each way (LRU: the oldest are evicted, memory never grows).
// On a stop the program is detached (the maps go with it): flows in progress then reach the VIP
// unrewritten.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "config/rule.h"

struct l4_lb;

namespace kvgate::l4 {

class L4Plane {
 public:
  // Loads and attaches; a clear error when the kernel refuses (no BPF, no permission, an
  // interface that does not exist).
  static Result<std::unique_ptr<L4Plane>> start(const std::vector<std::string>& ifaces);
  ~L4Plane();
  L4Plane(const L4Plane&) = delete;
  L4Plane& operator=(const L4Plane&) = delete;

  // Installs the L4 rules (mode 0) of `rules` (others are ignored); validated first, nothing
  // changes on an error. Services no longer present are removed; their flows end.
  Result<void> apply(const std::vector<config::RuleSpec>& rules);

  struct ServiceStats {
    std::string rule;  // the rule's key
    uint64_t packets = 0, bytes = 0;
  };
  std::vector<ServiceStats> stats() const;  // every installed service, summed over CPUs
  const std::vector<std::string>& interfaces() const { return ifaces_; }

 private:
  L4Plane() = default;
  struct Slot {
    uint32_t id;
    uint32_t generation;
    std::vector<uint8_t> key;  // its key in the service map (struct l4_svc_key)
  };
  struct l4_lb* skel_ = nullptr;
  std::vector<std::string> ifaces_;
  std::vector<int> ifindexes_;
  std::map<std::string, Slot> slots_;  // rule key -> its service slot
  std::vector<uint32_t> free_;         // slots not in use
  uint32_t generation_ = 0;
};

}  // namespace kvgate::l4
