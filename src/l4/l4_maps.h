// The maps the L4 program (bpf/l4_lb.bpf.c) and its control plane (l4_plane.cc) share.
// Addresses and ports are in network byte order, as on the wire.
#pragma once
#include <linux/types.h>  // (__u8 .. __u64, for the BPF program and the loader alike)

#define L4_MAX_SERVICES 1024
#define L4_MAX_ENDPOINTS 64
#define L4_MAX_FLOWS 262144

#define L4_MODE_DNAT 0
#define L4_MODE_ONEARM 1
#define L4_MODE_FULLNAT 2
#define L4_MODE_DSR 3
#define L4_MODE_HOSTONEARM 5  // one-arm on every address of this node (a service key each)

#define L4_SEL_RR 0
#define L4_SEL_HASH 1
#define L4_SEL_WEIGHTED 2
#define L4_SEL_PERSIST 3  // a client address keeps its endpoint (map `persist`)
#define L4_SEL_LC 4       // the endpoint up with the fewest live flows (map `ep_flows`)

// sel 3: how long a client's endpoint is kept after its last new flow (upstream's default
// persistence time, 3 hours).
#define L4_PERSIST_TIMEOUT_S 10800

// Flow states (struct l4_flow.state, kept in the ct entry).
#define L4_CT_SYN 0      // tcp: the SYN went out, no answer yet (10 s)
#define L4_CT_OPEN 1     // answered (udp flows start here)
#define L4_CT_CLOSING 2  // tcp: FINs both ways or an RST (10 s)
#define L4_FIN_CLIENT 1  // (struct l4_flow.fins)
#define L4_FIN_ENDPOINT 2

#define L4_SHORT_TIMEOUT_S 10

// The layout of these maps: bumped whenever a struct below changes meaning, even at the same
// size (libbpf reuses a pinned map whose sizes match): a start finding pinned maps of another
// layout removes them instead of misreading them.
// (4 is taken: a development build used it for maps of another shape; the next bump is 5.)
#define L4_MAPS_LAYOUT 3
#define L4_META_MAX_IFACES 64

// The pinned maps' own record (map `meta`, one entry), the control plane's only.
struct l4_meta {
  __u64 layout;           // L4_MAPS_LAYOUT of the build that made the maps
  __u64 netns_cookie;     // the network namespace they were made in (SO_NETNS_COOKIE)
  __u32 next_generation;  // the generation counter: never reused, across restarts too
  __u32 n_ifaces;
  __u32 ifindex[L4_META_MAX_IFACES];  // interfaces the program is attached to
};

struct l4_svc_key {
  __u32 vip;
  __u16 port;
  __u8 proto;
  __u8 pad;
};

struct l4_svc {
  __u32 id;          // slot of its counters and its endpoints' row
  __u32 generation;  // changes when the slot is given to another service: its flows end
  __u32 rr;          // round-robin turn (atomic)
  __u32 timeout_s;   // idle timeout of its flows
  __u32 total_weight;
  __u16 n_eps;
  __u8 sel;
  __u8 mode;      // L4_MODE_*
  __u16 port_lo;  // modes 1, 2: the source ports given to the endpoints' side of flows,
  __u16 port_n;   // port_lo .. port_lo + port_n - 1 (host order)
};

struct l4_ep {
  __u32 ip;
  __u16 port;
  __u8 up;  // health: only endpoints up get new flows
  __u8 pad;
  __u32 cum_weight;  // sum of the weights of this endpoint and those before it
  __u32 snat_ip;     // modes 1, 2: the source address the endpoint sees (0 in mode 0)
};

struct l4_flow_key {
  __u32 saddr;
  __u32 daddr;
  __u16 sport;
  __u16 dport;
  __u8 proto;
  __u8 pad[3];
};

struct l4_flow {
  __u32 nat_ip;  // ct: the endpoint; rct: the VIP
  __u16 nat_port;
  __u16 ep_index;
  // ct: the source the endpoint sees (the client itself in mode 0, the SNAT address and port in
  // modes 1 and 2); rct: the client, the answers' destination.
  __u32 peer_ip;
  __u16 peer_port;
  __u16 flags;  // L4_FLOW_* (ct entries)
  __u32 svc_id;
  __u32 timeout_s;
  __u32 generation;
  __u16 state;  // L4_CT_* (ct entries only)
  __u16 fins;   // L4_FIN_* seen (ct entries only)
  __u64 last_ns;
};

// Why a packet to a service was dropped (struct l4_counters.drops).
#define L4_DROP_NO_ENDPOINT 0  // no endpoint up
#define L4_DROP_UNTRACKED 1    // a TCP packet of a connection not tracked (not a SYN)
#define L4_DROP_NO_PORT 2      // modes 1, 2: no free source port toward the endpoint
#define L4_DROP_NO_ROUTE \
  3  // modes 1-3: no route (DSR: the endpoint not on a network of this
     // node), forwarding off, TTL out, or over the MTU
#define L4_DROP_REASONS 4

#define L4_FLOW_DSR 1  // (struct l4_flow.flags) mode 3: sent to the endpoint unchanged
// A client's SYN opened it (or reopened it): the endpoint's answer to it is a connect's outcome
// (passive health). A flow a hash rule starts on another packet is not a connect.
#define L4_FLOW_CONNECT 2
#define L4_FLOW_RETRIED 4  // its SYN came again unanswered, counted once (passive health)

struct l4_counters {
  __u64 packets;  // forwarded, both directions
  __u64 bytes;
  __u64 drops[L4_DROP_REASONS];
};

// Per endpoint row (service id * L4_MAX_ENDPOINTS + index), one copy updated with atomic adds:
// what its flows forwarded (both directions; DSR: the clients' side only) and its TCP connects.
// Moved with the endpoint when its row changes, zeroed when the row is given to another.
// (New maps, not a changed layout: a gateway of layout 3 leaves pins libbpf reuses, and creates
// these.)
struct l4_ep_counters {
  __u64 packets;
  __u64 bytes;
  // TCP connects to the endpoint (passive health; not DSR's, whose answers pass elsewhere):
  __u64 answered;    // its SYN-ACK to a flow not answered yet
  __u64 refused;     // its RST to a flow not answered yet
  __u64 unanswered;  // the client's SYN sent again to a flow not answered yet (about 1 s late)
};

// sel 3: a client address's endpoint (map `persist`, LRU).
struct l4_persist_key {
  __u32 svc_id;
  __u32 generation;  // the service's: a slot given to another service finds no entry
  __u32 saddr;
};
struct l4_persist {
  __u32 ip;  // the endpoint (looked up again among the rule's endpoints: its row may move)
  __u16 port;
  __u16 pad;
  __u64 last_ns;  // the client's last new flow
};
