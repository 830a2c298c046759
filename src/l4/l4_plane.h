// The L4 data path's control plane (issue 33): loads the tc program (bpf/l4_lb.bpf.c, built into
// the binary as a libbpf skeleton), attaches it at tc ingress of each interface `serve
// --l4-ifaces` names, and programs its maps from the rule set on every commit: the program is
// never reloaded for a rule change, and a flow keeps its endpoint while it lives.
//
// Served: modes 0 (DNAT), 1 (one-arm: the endpoint sees this node's address toward it, found by
// a route lookup, again every second; source ports outside ip_local_port_range), 2 (full NAT:
// the endpoint sees the VIP; source ports 1024-65535, the client's own kept when free), 3 (DSR:
// sent unchanged to an endpoint on a network of this node, which holds the VIP; sel 1 only) and
// 5 (host one-arm: mode 1 on every IPv4 address of this node, followed every second; VIP
// 0.0.0.0) for tcp and udp, sel 0 (round-robin), 1 (hash of the client's address and port: per
// flow, placed by rendezvous hashing), 2 (weighted round-robin by the endpoints' weights), 3
// (persist: a client address keeps its endpoint for 3 hours after its last new flow) and 4 (least
// connections: the fewest live flows, counted by the program and set to the truth every second),
// inactiveTimeOut as the flows' idle timeout (default 900 s tcp, as IPVS's established timeout; 30
// s udp), a rule with adminStateUp false not installed. Bounds: 1,024 services of at most 64
// endpoints; 262,144 tracked flows each way (LRU: the oldest are evicted, memory never grows;
// preallocated, about 50 MB of kernel memory; with sel 3's 262,144 client addresses and the
// per-endpoint counters about 73 MB). A service whose rule did not change is not rewritten (its
// round-robin turn and its rows stay as they are). The maps are pinned under <--l4-pin-dir, default
// /sys/fs/bpf>/kvgate/net-<the network namespace's inode> (bpffs; the default is mounted when it is
// not): a restarted gateway loads its program over the same maps and adopts the services it finds
// (their slots and generations), so tracked flows live on. On a stop with keep_on_exit (serve
// --l4-on-exit keep, the default) the program stays attached and forwards with its last maps until
// the next start replaces it; with detach it is detached and the pinned maps removed (flows in
// progress then reach the VIP unrewritten). After a crash: as keep.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/result.h"
#include "config/rule.h"

struct l4_lb;
struct l4_ep;
struct l4_svc;

namespace kvgate::l4 {

class L4Plane {
 public:
  // Loads and attaches; a clear error when the kernel refuses (no BPF, no permission, an
  // interface that does not exist).
  // keep_on_exit: serve --l4-on-exit; pin_base: --l4-pin-dir (a bpf filesystem).
  static Result<std::unique_ptr<L4Plane>> start(const std::vector<std::string>& ifaces,
                                                bool keep_on_exit = true,
                                                const std::string& pin_base = "/sys/fs/bpf");
  ~L4Plane();
  L4Plane(const L4Plane&) = delete;
  L4Plane& operator=(const L4Plane&) = delete;

  // Installs the L4 rules (modes 0-3, 5) of `rules` (others are ignored); validated first, nothing
  // changes on a validation error. Services no longer present are removed; their flows end.
  Result<void> apply(const std::vector<config::RuleSpec>& rules);
  // Removes the services found in pinned maps at start that no rule took (serve calls it once
  // the state file's rules are applied, whatever came of that; until then apply() keeps them).
  void finishAdoption();
  // Undoes the last apply() exactly (the same slots and generations: flows of services it
  // removed or replaced live on): the data plane's rollback when the fullproxy refused the set.
  void rollback();

  // Health (control thread, every second): `up(ip, port)` for each endpoint of every installed
  // service; an endpoint down gets no new flows (its flows go on), one back up gets them again.
  // One-arm rules' source addresses are looked up again (routes and addresses change).
  // Returns the endpoints whose state changed, as "rule key: ip:port up|down" or "rule key:
  // ip:port source A.B.C.D".
  std::vector<std::string> syncHealth(
      const std::function<bool(const std::string& rule, const std::string& ip, uint16_t port)>& up);

  // Live flows per endpoint (control thread, every second after syncHealth): the tracked flows
  // open and not idle, counted from the flow table by the endpoint's address and written where
  // sel 4 reads them (the program counts its new flows there at once in between). The table is
  // swept every call while a sel 4 rule is installed, else every 10th (the metric only).
  void syncFlows();

  // TCP connect outcomes per endpoint since the last call (control thread, every second, before
  // syncHealth): what passive health and the circuit breaker read.
  struct ConnectOutcomes {
    std::string rule, ip;
    uint16_t port = 0;
    uint64_t answered = 0, refused = 0, unanswered = 0;
  };
  std::vector<ConnectOutcomes> connectOutcomes();

  struct ServiceStats {
    std::string rule;  // the rule's key
    uint64_t packets = 0, bytes = 0;
    struct Endpoint {
      std::string addr;                 // ip:port
      uint64_t packets = 0, bytes = 0;  // forwarded by its flows, both directions
      uint32_t flows = 0;               // live flows at the last syncFlows()
      uint64_t answered = 0, refused = 0, unanswered = 0;  // TCP connects (l4_ep_counters)
      bool up = true;  // new flows go there (probes, passive health, breaker: syncHealth)
    };
    std::vector<Endpoint> endpoints;   // in the rule's order
    uint64_t drops[4] = {0, 0, 0, 0};  // by reason: no endpoint up, untracked, no free port,
                                       // no route
  };
  static const char* dropReason(size_t i);  // "no_endpoint", "untracked", "no_port", "no_route"
  std::vector<ServiceStats> stats() const;  // every installed service, summed over CPUs
  const std::vector<std::string>& interfaces() const { return ifaces_; }

 private:
  L4Plane() = default;
  struct Slot {
    uint32_t id;
    uint32_t generation;
    std::vector<uint8_t> key;  // its key in the service map (struct l4_svc_key)
    std::vector<uint8_t> svc;  // the service entry as written, rr 0 (struct l4_svc)
    std::vector<uint8_t> eps;  // its endpoint rows as planned, all up (struct l4_ep each)
    std::vector<std::pair<std::string, uint16_t>> addrs;  // each endpoint's address and port
    std::vector<uint8_t> down;  // each endpoint's health as last synced (1: no new flows)
    bool sync_failed = false;   // the last health write failed (logged once)
    bool source_lost = false;   // one-arm: an endpoint without a route now (logged once)
    std::string spec;           // what the rule asked (specOf): unchanged rules are kept
    std::vector<uint32_t> live;  // live flows per endpoint at the last syncFlows()
    // connectOutcomes(): each endpoint's counters (answered, refused, unanswered) as last read
    std::map<std::pair<std::string, uint16_t>, std::array<uint64_t, 3>> outcomes_seen;
  };
  struct State {
    std::map<std::string, Slot> slots;  // rule key -> its service slot
    std::vector<uint32_t> free;         // slots not in use
    uint32_t generation = 0;
  };
  Result<void> install(const State& from, const State& to);  // the maps follow `to` (from: as now)
  // A slot's endpoint rows and service entry as health has them: endpoints down not up, and the
  // weights of the endpoints up only (a down endpoint's share spread, not handed to the next).
  static void rowsOf(const Slot& slot, std::vector<l4_ep>& rows, l4_svc& svc);
  // Before a slot's rows are written: each endpoint's counters and live flows follow it to its
  // row, from whichever row of the slot holds them now (row_owner_: what was last written there,
  // so a commit undone halfway moves them back right); a row nobody held starts at zero.
  void moveEndpointState(const Slot& slot);
  // Whose counters each endpoint row (service id * L4_MAX_ENDPOINTS + index) holds: the
  // service's generation and the endpoint's address (rows never written here: none).
  using RowOwner = std::tuple<uint32_t, std::string, uint16_t>;
  std::map<uint32_t, RowOwner> row_owner_;
  // Counters and live flows of endpoints the last commit took out of their slot, until the next
  // apply(): an undone commit (rollback, a failed install reverted) gives them back.
  std::map<RowOwner, std::pair<std::array<uint64_t, 5>, uint32_t>> departed_;  // (l4_ep_counters)
  // Services found in pinned maps at start, by their service key: the slot and generation a rule
  // of that key takes again (its flows live on). Removed by the first apply() that does not claim
  // them.
  // Returns the interfaces the last process's program was attached to.
  std::vector<uint32_t> adoptPinned();
  void writeMeta();  // the pinned maps' record: layout, namespace, generation, interfaces
  struct l4_lb* skel_ = nullptr;
  std::string pin_dir_;  // "" when the maps are not pinned
  int pin_lock_fd_ = -1;  // the pin directory, flock()ed: one gateway per namespace owns it
  int ns_lock_fd_ = -1;   // an abstract socket bound: one gateway per network namespace
  std::vector<int> attached_;  // interfaces this process attached its program to
  bool started_ = false;       // start() finished: the pins are this process's to remove
  uint64_t cookie_ = 0;   // the network namespace's cookie
  uint32_t prog_id_ = 0;  // our program's id: only it is detached on a stop
  bool keep_on_exit_ = true;
  bool flows_sync_failed_ = false;  // (said once)
  uint64_t flows_calls_ = 0;        // syncFlows() calls (a sweep every 10th without sel 4)
  std::vector<std::string> ifaces_;
  std::vector<int> ifindexes_;
  State now_, before_;  // the maps' state, and before the last apply()
};

}  // namespace kvgate::l4
