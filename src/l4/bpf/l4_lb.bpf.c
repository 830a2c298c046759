// The L4 data path (issue 33): classic load balancing of TCP and UDP services at tc ingress.
// Modes: 0 DNAT (the endpoint sees the client; its answers must route back through this node),
// 1 one-arm (the endpoint sees this node's address toward it), 2 full NAT (the endpoint sees the
// VIP), 3 DSR (the packet goes unchanged, but for its MACs and TTL, to the endpoint, which holds
// the VIP and answers the client directly: only the client's side is seen here, its flow open on
// the client's first packet after its SYN, ended by an RST or idling out). Modes 1 and 2 give
// each flow a source port of the service's range that no live flow to the same endpoint holds
// and no service of that address listens on (the client's own port first
// when it is in the range, then random others, L4_SNAT_TRIES in all; none free: the packet is
// dropped and counted). A closed flow keeps its port L4_TIME_WAIT_S (the endpoint's TIME_WAIT).
//
// Algorithm, per IPv4 packet on an interface named by `serve --l4-ifaces`:
//   1. A packet of a tracked flow (ct: client -> VIP, its service still the one that made it)
//      is rewritten to the flow's endpoint (and, modes 1 and 2, to its source address and port).
//      A flow keeps its endpoint while it lives, through endpoint-set changes (a removed
//      endpoint drains: its flows go on until they end).
//   2. A packet to a service (services: VIP, port, protocol) with no flow starts one: a UDP
//      datagram, a TCP SYN (another TCP packet with no flow is dropped, unless the rule hashes:
//      an endpoint that never saw the connection would reset it). The endpoint is picked by the
//      rule's sel (0 round-robin, 1 a hash of the client's address and port: per flow, not per
//      client, the endpoint up scoring highest with it (rendezvous: picked again, a flow lands
//      where it was unless its endpoint left), 2 weighted round-robin over the endpoints' weights,
//      3 persist: a client address keeps the endpoint its last new flow got, L4_PERSIST_TIMEOUT_S
//      after that flow, else round-robin, 4 least connections: the fewest live flows, equals in
//      turn), skipping endpoints marked down; the flow (ct) and its reverse (rct: endpoint ->
//      client) are recorded, and counted in the endpoint's live flows (ep_flows, set to the truth
//      by the control plane every second: flows open and not idle).
//   3. A packet of a tracked flow's reverse direction (rct: endpoint -> the source it saw, its ct
//      entry alive and pointing at that endpoint) gets the VIP and port back as its source and,
//      modes 1 and 2, the client as its destination. A stale reverse entry is dropped and the
//      packet left alone (direct traffic between the client and the endpoint is not ours).
// Mode 0 packets go on through the stack's routing; modes 1-3 are sent by a FIB lookup
// (bpf_fib_lookup, then bpf_redirect with the next hop's addresses, or bpf_redirect_neigh while
// the neighbour is unresolved), TTL decremented (send()). No route, forwarding off or a packet
// over the MTU: dropped and counted.
// Timeouts (idle): a TCP flow not yet answered, or closed (FINs both ways, or an RST), 10 s;
// otherwise the rule's inactiveTimeOut (default 900 s tcp, 30 s udp; l4_plane.cc). Both tables
// are LRU: a flood of new flows evicts the oldest, never grows memory. Per-service packet and
// byte counters (per CPU), per-endpoint ones (atomic adds). Packets the program does not rewrite
// continue to the interface's other tc filters (TC_ACT_UNSPEC). Not translated: fragments, ICMP
// errors (docs/l4.md). Knobs: only the maps, programmed by the control plane (src/l4/l4_plane.cc)
// on each rule commit; the program is never reloaded for a rule change. The kernel's headers first:
// libbpf's use their types.
// clang-format off
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
// clang-format on

#include "../l4_hash.h"
#include "../l4_maps.h"

char LICENSE[] SEC("license") = "GPL";

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, L4_MAX_SERVICES);
  __uint(map_flags, BPF_F_NO_PREALLOC);  // (an update never hands a reader's element to another)
  __type(key, struct l4_svc_key);
  __type(value, struct l4_svc);
} services SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, L4_MAX_SERVICES* L4_MAX_ENDPOINTS);
  __type(key, __u32);
  __type(value, struct l4_ep);
} endpoints SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, L4_MAX_FLOWS);
  __type(key, struct l4_flow_key);
  __type(value, struct l4_flow);
} ct SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, L4_MAX_FLOWS);
  __type(key, struct l4_flow_key);
  __type(value, struct l4_flow);
} rct SEC(".maps");

// Per-key locks of take_reverse and of section 3's stale delete (held only while one program
// runs; preallocated: no allocation per new flow).
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, struct l4_flow_key);
  __type(value, __u64);
} claims SEC(".maps");

// The control plane's record (struct l4_meta); the program never reads it.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct l4_meta);
} meta SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, L4_MAX_SERVICES);
  __type(key, __u32);
  __type(value, struct l4_counters);
} counters SEC(".maps");

// Per endpoint row: packets and bytes (atomic adds: a per-CPU copy of 65,536 rows would cost a
// megabyte of kernel memory per CPU), and live flows (sel 4 picks the fewest): counted up here
// on each new flow, set to the truth (flows open, not idle) by the control plane every second.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, L4_MAX_SERVICES* L4_MAX_ENDPOINTS);
  __type(key, __u32);
  __type(value, struct l4_ep_counters);
} ep_counters SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, L4_MAX_SERVICES* L4_MAX_ENDPOINTS);
  __type(key, __u32);
  __type(value, __u32);
} ep_flows SEC(".maps");

// sel 1's running best (one per CPU; see l4_rendezvous).
struct l4_best {
  int index;
  __u32 score;
};
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct l4_best);
} scratch SEC(".maps");

// sel 3: each client address's endpoint, kept L4_PERSIST_TIMEOUT_S after its last new flow
// (LRU: a flood of client addresses evicts the oldest).
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, L4_MAX_FLOWS);
  __type(key, struct l4_persist_key);
  __type(value, struct l4_persist);
} persist SEC(".maps");

#define IP_CSUM_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, check))
#define IP_SRC_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, saddr))
#define IP_DST_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, daddr))
#define NS_PER_S 1000000000ull
#define L4_SNAT_TRIES 8
#define L4_TIME_WAIT_S 60  // (Linux's TCP_TIMEWAIT_LEN)
#define AF_INET 2

// Rewrites the address at ip_off and the port at l4_off + port_off, checksums included.
static __always_inline int rewrite(struct __sk_buff* skb, __u32 l4_off, __u8 proto, __u32 ip_off,
                                   __u32 old_ip, __u32 new_ip, __u32 port_off, __u16 old_port,
                                   __u16 new_port) {
  const __u32 csum_off = l4_off + (proto == IPPROTO_TCP ? __builtin_offsetof(struct tcphdr, check)
                                                        : __builtin_offsetof(struct udphdr, check));
  const __u64 mangled = proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
  if (old_ip != new_ip) {
    if (bpf_l4_csum_replace(skb, csum_off, old_ip, new_ip, BPF_F_PSEUDO_HDR | mangled | 4))
      return -1;
    if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_ip, new_ip, 4)) return -1;
    if (bpf_skb_store_bytes(skb, ip_off, &new_ip, 4, 0)) return -1;
  }
  if (old_port != new_port) {
    if (bpf_l4_csum_replace(skb, csum_off, old_port, new_port, mangled | 2)) return -1;
    if (bpf_skb_store_bytes(skb, l4_off + port_off, &new_port, 2, 0)) return -1;
  }
  return 0;
}

#define L4_NO_ROW 0xffffffffu

// Counts a forwarded packet for its service and, when `row` is one (the flow's endpoint still in
// the row it was picked from), for its endpoint.
static __always_inline void count(__u32 svc_id, __u32 row, __u32 bytes) {
  struct l4_counters* c = bpf_map_lookup_elem(&counters, &svc_id);
  if (c) {
    c->packets += 1;
    c->bytes += bytes;
  }
  if (row == L4_NO_ROW) return;
  struct l4_ep_counters* e = bpf_map_lookup_elem(&ep_counters, &row);
  if (e) {
    __sync_fetch_and_add(&e->packets, 1);
    __sync_fetch_and_add(&e->bytes, bytes);
  }
}

// Counts a TCP connect outcome for the endpoint in `row` (passive health, l4_ep_counters).
#define L4_ANSWERED 0
#define L4_REFUSED 1
#define L4_UNANSWERED 2
static __always_inline void connect_outcome(__u32 row, int what) {
  if (row == L4_NO_ROW) return;
  struct l4_ep_counters* e = bpf_map_lookup_elem(&ep_counters, &row);
  if (!e) return;
  if (what == L4_ANSWERED)
    __sync_fetch_and_add(&e->answered, 1);
  else if (what == L4_REFUSED)
    __sync_fetch_and_add(&e->refused, 1);
  else
    __sync_fetch_and_add(&e->unanswered, 1);
}

// The endpoint row of flow `f` (ct entry), L4_NO_ROW when the row now holds another endpoint
// (the rule's endpoint list changed since the flow was picked).
static __always_inline __u32 row_of(const struct l4_flow* f) {
  if (f->ep_index >= L4_MAX_ENDPOINTS || f->svc_id >= L4_MAX_SERVICES) return L4_NO_ROW;
  __u32 row = f->svc_id * L4_MAX_ENDPOINTS + f->ep_index;
  struct l4_ep* e = bpf_map_lookup_elem(&endpoints, &row);
  return e && e->ip == f->nat_ip && e->port == f->nat_port ? row : L4_NO_ROW;
}

static __always_inline int drop(__u32 svc_id, __u32 reason) {
  struct l4_counters* c = bpf_map_lookup_elem(&counters, &svc_id);
  if (c && reason < L4_DROP_REASONS) c->drops[reason] += 1;
  return TC_ACT_SHOT;
}

// The scans below are global functions: the verifier checks each once, on its own, not again at
// every path that reaches it (inlined, their 64-step loops multiplied the program's states past
// the verifier's limit).

// The index of endpoint ip:port among the first n endpoints of service `svc_id` that are up;
// -1 when it is not one.
__noinline int l4_find_up(__u32 svc_id, __u32 n, __u32 ip, __u32 port) {
  for (__u32 i = 0; i < L4_MAX_ENDPOINTS; ++i) {
    if (i >= n) break;
    __u32 slot = svc_id * L4_MAX_ENDPOINTS + i;
    struct l4_ep* e = bpf_map_lookup_elem(&endpoints, &slot);
    if (e && e->up && e->ip == ip && e->port == (__u16)port) return (int)i;
  }
  return -1;
}

// sel 4: the endpoint up with the fewest live flows among the first n of service `svc_id`;
// among equals the first from `start` on (equal counts take turns). -1 when none is up.
__noinline int l4_least_flows(__u32 svc_id, __u32 n, __u32 start) {
  int best = -1;
  __u32 least = 0xffffffffu;
  if (n == 0 || n > L4_MAX_ENDPOINTS) return -1;
  for (__u32 i = 0; i < L4_MAX_ENDPOINTS; ++i) {
    if (i >= n) break;
    __u32 idx = (start + i) % n;
    __u32 slot = svc_id * L4_MAX_ENDPOINTS + idx;
    struct l4_ep* e = bpf_map_lookup_elem(&endpoints, &slot);
    __u32* live = bpf_map_lookup_elem(&ep_flows, &slot);
    if (!e || !e->up || !live) continue;
    if (best < 0 || *live < least) {
      best = (int)idx;
      least = *live;
    }
  }
  return best;
}

// sel 1: the endpoint up whose (flow hash, endpoint address) scores highest (rendezvous
// hashing): a flow picked again (idled out, evicted, or an untracked packet of a connection
// this node forgot) lands where it was unless its endpoint left; an endpoint added takes about
// 1/n of the flows, all from the others alike, and one removed gives back only its own. Scored
// by address and port, not by place in the list. -1 when none is up.
__noinline int l4_rendezvous(__u32 svc_id, __u32 n, __u32 flow_hash) {
  // (the best so far kept in a scratch map, not in registers: the verifier tracks no map value,
  // so the ways through the loop collapse; held in registers, they multiplied past its million
  // instructions)
  const __u32 zero = 0;
  struct l4_best* b = bpf_map_lookup_elem(&scratch, &zero);
  if (!b) return -1;
  b->index = -1;
  b->score = 0;
  for (__u32 i = 0; i < L4_MAX_ENDPOINTS; ++i) {
    if (i >= n) break;
    __u32 slot = svc_id * L4_MAX_ENDPOINTS + i;
    struct l4_ep* e = bpf_map_lookup_elem(&endpoints, &slot);
    if (!e || !e->up) continue;
    const __u32 score = l4_rendezvous_score(flow_hash, e->ip, e->port);
    if (b->index < 0 || score > b->score) {
      b->index = (int)i;
      b->score = score;
    }
  }
  return b->index;
}

// The endpoint index for a new flow; -1 when none is up.
static __always_inline int pick_once(struct l4_svc* svc, const struct l4_flow_key* k) {
  const __u32 n = svc->n_eps;
  if (n == 0 || n > L4_MAX_ENDPOINTS) return -1;
  __u32 start;
  if (svc->sel == L4_SEL_HASH) {
    // (the scan below starts at it and takes it, up when scored; the same shape as the other
    // selectors' keeps the verifier's walk short. Marked down in between, by a commit or health
    // at that instant: the next one up in list order)
    const int r = l4_rendezvous(svc->id, n, l4_flow_hash(k->saddr, k->sport, k->proto));
    if (r < 0) return -1;
    start = (__u32)r;
  } else {
    const __u32 turn = __sync_fetch_and_add(&svc->rr, 1);
    if (svc->sel == L4_SEL_WEIGHTED && svc->total_weight > 0) {
      // the first endpoint up whose cumulative weight exceeds this turn's place in the cycle
      const __u32 place = turn % svc->total_weight;
      for (__u32 i = 0; i < L4_MAX_ENDPOINTS; ++i) {
        if (i >= n) break;
        __u32 slot = svc->id * L4_MAX_ENDPOINTS + i;
        struct l4_ep* e = bpf_map_lookup_elem(&endpoints, &slot);
        if (e && e->up && place < e->cum_weight) return (int)i;
      }
    }
    start = turn % n;
    if (svc->sel == L4_SEL_LC) return l4_least_flows(svc->id, n, start);
  }
  for (__u32 i = 0; i < L4_MAX_ENDPOINTS; ++i) {
    if (i >= n) break;
    __u32 idx = (start + i) % n;
    __u32 slot = svc->id * L4_MAX_ENDPOINTS + idx;
    struct l4_ep* e = bpf_map_lookup_elem(&endpoints, &slot);
    if (e && e->up) return (int)idx;
  }
  return -1;
}

// pick_once, and for sel 3 the client address's endpoint first: the one its last new flow went
// to when that was less than L4_PERSIST_TIMEOUT_S ago and it is still one of the rule's
// endpoints and up (wherever its row is now); otherwise round-robin, remembered. Every pick is
// counted in the endpoint's live flows at once (sel 4 reads them; the control plane sets them to
// the truth every second).
static __always_inline int pick(struct l4_svc* svc, const struct l4_flow_key* k, __u64 now) {
  int idx = -1;
  struct l4_persist_key pk = {.svc_id = svc->id, .generation = svc->generation, .saddr = k->saddr};
  if (svc->sel == L4_SEL_PERSIST) {
    struct l4_persist* p = bpf_map_lookup_elem(&persist, &pk);
    if (p && (__s64)(now - p->last_ns) <= (__s64)((__u64)L4_PERSIST_TIMEOUT_S * NS_PER_S)) {
      idx = l4_find_up(svc->id, svc->n_eps, p->ip, p->port);
      if (idx >= 0) p->last_ns = now;
    }
  }
  if (idx < 0) {
    idx = pick_once(svc, k);
    if (idx < 0) return -1;
    if (svc->sel == L4_SEL_PERSIST) {
      __u32 slot = svc->id * L4_MAX_ENDPOINTS + (__u32)idx;
      struct l4_ep* e = bpf_map_lookup_elem(&endpoints, &slot);
      if (e) {
        struct l4_persist v = {.ip = e->ip, .port = e->port, .last_ns = now};
        bpf_map_update_elem(&persist, &pk, &v, BPF_ANY);
      }
    }
  }
  __u32 slot = svc->id * L4_MAX_ENDPOINTS + (__u32)idx;
  __u32* live = bpf_map_lookup_elem(&ep_flows, &slot);
  if (live) __sync_fetch_and_add(live, 1);
  return idx;
}

// How a packet leaves (send()): through the stack's routing (mode 0), by a FIB redirect
// (modes 1, 2: its source may be an address of this node, which the input route would drop as a
// martian), or unchanged to the endpoint's MAC (mode 3, DSR: `via`, the endpoint, must be on a
// network of this node; were it behind a router, the router would send the VIP back here).
#define SEND_STACK 0
#define SEND_FIB 1
#define SEND_DSR 2

// Counts the packet as forwarded and sends it on (see SEND_*); a FIB miss, forwarding off on the
// ingress interface, a TTL out or a packet over the egress MTU: dropped (no_route).
static __always_inline int send(struct __sk_buff* skb, int how, __u32 via, __u32 svc_id, __u32 row,
                                __u32 bytes, __u8 tos) {
  if (how == SEND_STACK) {
    count(svc_id, row, bytes);
    return TC_ACT_OK;
  }
  void* data = (void*)(long)skb->data;
  void* end = (void*)(long)skb->data_end;
  struct iphdr* ip = data + ETH_HLEN;
  if ((void*)(ip + 1) > end) return drop(svc_id, L4_DROP_NO_ROUTE);
  if (ip->ttl <= 1) return drop(svc_id, L4_DROP_NO_ROUTE);
  struct bpf_fib_lookup fl = {};
  fl.family = AF_INET;
  fl.tos = tos;
  fl.l4_protocol = ip->protocol;
  // (no tot_len: the kernel then checks the MTU on the skb itself, which knows GSO; a GSO packet's
  // tot_len is the whole super-packet's)
  fl.ipv4_src = ip->saddr;
  fl.ipv4_dst = how == SEND_DSR ? via : ip->daddr;
  fl.ifindex = skb->ingress_ifindex;
  const long rc = bpf_fib_lookup(skb, &fl, sizeof fl, 0);
  if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
    return drop(svc_id, L4_DROP_NO_ROUTE);
  // (the lookup leaves the next hop in ipv4_dst: DSR's must be the endpoint itself)
  if (how == SEND_DSR && fl.ipv4_dst != via) return drop(svc_id, L4_DROP_NO_ROUTE);
  // TTL - 1: the (ttl, protocol) word and the header checksum
  const __u16 old_word = *(__u16*)((void*)ip + 8);
  const __u16 new_word = bpf_htons(bpf_ntohs(old_word) - 0x100);
  if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_word, new_word, 2)) return TC_ACT_SHOT;
  if (bpf_skb_store_bytes(skb, ETH_HLEN + 8, &new_word, 2, 0)) return TC_ACT_SHOT;
  count(svc_id, row, bytes);
  if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
    struct bpf_redir_neigh nh = {.nh_family = AF_INET, .ipv4_nh = fl.ipv4_dst};
    return bpf_redirect_neigh(fl.ifindex, &nh, sizeof nh, 0);
  }
  if (bpf_skb_store_bytes(skb, 0, fl.dmac, ETH_ALEN, 0)) return TC_ACT_SHOT;
  if (bpf_skb_store_bytes(skb, ETH_ALEN, fl.smac, ETH_ALEN, 0)) return TC_ACT_SHOT;
  return bpf_redirect(fl.ifindex, 0);
}

static __always_inline int expired(const struct l4_flow* f, __u64 now) {
  const __u64 limit = f->state == L4_CT_OPEN ? (__u64)f->timeout_s * NS_PER_S
                                             : (__u64)L4_SHORT_TIMEOUT_S * NS_PER_S;
  // (signed: another CPU may have stored a later time since `now` was read)
  return (__s64)(now - f->last_ns) > (__s64)limit;
}

// The ct entry of the flow that answers through reverse entry `r` (key `rk`): tracked and
// pointing at this endpoint and this source (idle or not); 0 when there is none.
static __always_inline struct l4_flow* flow_of(const struct l4_flow_key* rk,
                                               const struct l4_flow* r) {
  struct l4_flow_key ck = {.saddr = r->peer_ip,
                           .daddr = r->nat_ip,
                           .sport = r->peer_port,
                           .dport = r->nat_port,
                           .proto = rk->proto};
  struct l4_flow* f = bpf_map_lookup_elem(&ct, &ck);
  if (!f || f->nat_ip != rk->saddr || f->nat_port != rk->sport || f->peer_ip != rk->daddr ||
      f->peer_port != rk->dport)
    return 0;
  return f;
}

// The live flow that answers through reverse entry `r`: flow_of, not idle.
static __always_inline struct l4_flow* reverse_flow(const struct l4_flow_key* rk,
                                                    const struct l4_flow* r, __u64 now) {
  struct l4_flow* f = flow_of(rk, r);
  return f && !expired(f, now) ? f : 0;
}

// True when the reverse entry `r` (key `rk`, its time read once as `seen`) is taken: created
// less than a second ago (its flow may be being made on another CPU), or a flow answers through
// it: its ct entry tracked, pointing at this endpoint and this source, and not idle; a closed
// SNAT flow, or one whose rule was deleted or replaced (the endpoint may still hold the
// connection), holds its source port L4_TIME_WAIT_S after its last packet.
static __always_inline int rct_in_use(const struct l4_flow_key* rk, const struct l4_flow* r,
                                      __u64 seen, __u64 now) {
  if ((__s64)(now - seen) < (__s64)NS_PER_S) return 1;
  const int snat = r->peer_ip != rk->daddr || r->peer_port != rk->dport;
  struct l4_flow* f = flow_of(rk, r);
  if (!f) return 0;
  struct l4_svc_key vk = {.vip = r->nat_ip, .port = r->nat_port, .proto = rk->proto};
  struct l4_svc* vs = bpf_map_lookup_elem(&services, &vk);
  const int gone = !vs || vs->generation != r->generation;
  if (snat && (gone || f->state == L4_CT_CLOSING))
    return (__s64)(now - f->last_ns) <= (__s64)((__u64)L4_TIME_WAIT_S * NS_PER_S);
  return !gone && !expired(f, now);
}

// Takes the reverse key `rk` for a new flow (its entry `rf`), under a per-key lock (an entry of
// `claims` inserted with BPF_NOEXIST, deleted before returning: two CPUs taking one key
// serialize, and the second finds the first's entry fresh): inserted when absent, overwritten
// when stale. 0 when taken (or the lock is held: another CPU is taking it now).
static __always_inline int take_reverse(const struct l4_flow_key* rk, const struct l4_flow* rf,
                                        __u64 now) {
  if (bpf_map_update_elem(&claims, rk, &now, BPF_NOEXIST) != 0) return 0;
  int taken = 0;
  struct l4_flow* old = bpf_map_lookup_elem(&rct, rk);
  if (old) {
    const __u64 seen = old->last_ns;
    if (!rct_in_use(rk, old, seen, now)) taken = bpf_map_update_elem(&rct, rk, rf, BPF_ANY) == 0;
  } else {
    taken = bpf_map_update_elem(&rct, rk, rf, BPF_NOEXIST) == 0;
  }
  bpf_map_delete_elem(&claims, rk);
  return taken;
}

static __always_inline void note_flags(struct l4_flow* f, __u8 tcp_flags, __u16 fin_bit) {
  if (tcp_flags & 1) f->fins |= fin_bit;
  if ((tcp_flags & 4) || f->fins == (L4_FIN_CLIENT | L4_FIN_ENDPOINT)) f->state = L4_CT_CLOSING;
}

SEC("tc")
int l4_ingress(struct __sk_buff* skb) {
  void* data = (void*)(long)skb->data;
  void* end = (void*)(long)skb->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP)) return TC_ACT_UNSPEC;
  struct iphdr* ip = (void*)(eth + 1);
  if ((void*)(ip + 1) > end || ip->ihl < 5) return TC_ACT_UNSPEC;
  if (ip->frag_off & bpf_htons(0x3fff)) return TC_ACT_UNSPEC;  // fragments: not translated
  const __u8 proto = ip->protocol;
  if (proto != IPPROTO_TCP && proto != IPPROTO_UDP) return TC_ACT_UNSPEC;
  const __u32 l4_off = ETH_HLEN + ip->ihl * 4;
  __u16 sport, dport;
  __u8 tcp_flags = 0;  // 1 FIN, 2 SYN without ACK, 4 RST, 8 SYN with ACK
  if (proto == IPPROTO_TCP) {
    struct tcphdr* th = (void*)ip + ip->ihl * 4;
    if ((void*)(th + 1) > end) return TC_ACT_UNSPEC;
    sport = th->source;
    dport = th->dest;
    tcp_flags = (th->fin ? 1 : 0) | (th->syn && !th->ack ? 2 : 0) | (th->rst ? 4 : 0) |
                (th->syn && th->ack ? 8 : 0);
  } else {
    struct udphdr* uh = (void*)ip + ip->ihl * 4;
    if ((void*)(uh + 1) > end) return TC_ACT_UNSPEC;
    sport = uh->source;
    dport = uh->dest;
  }
  const __u64 now = bpf_ktime_get_ns();
  const __u32 saddr = ip->saddr, daddr = ip->daddr, bytes = skb->len;
  const __u8 tos = ip->tos;
  struct l4_flow_key k = {
      .saddr = saddr, .daddr = daddr, .sport = sport, .dport = dport, .proto = proto};
  struct l4_svc_key sk = {.vip = daddr, .port = dport, .proto = proto};
  struct l4_svc* svc = bpf_map_lookup_elem(&services, &sk);

  if (svc) {
    // 1. A tracked flow, client -> VIP.
    struct l4_flow* f = bpf_map_lookup_elem(&ct, &k);
    if (f && (f->generation != svc->generation || expired(f, now))) {
      bpf_map_delete_elem(&ct, &k);  // (its service was replaced, or it idled out)
      f = 0;
    }
    if (f && (tcp_flags & 2) &&
        (f->state == L4_CT_CLOSING || (f->state == L4_CT_SYN && !(f->flags & L4_FLOW_DSR)))) {
      // A SYN on a closed flow (the client reusing its 4-tuple) or on one not answered yet (a
      // retry) whose endpoint is down or no longer the rule's: the flow starts over, picked
      // again. (An open flow keeps its endpoint: a removed endpoint drains; a DSR flow's
      // endpoint may have answered the client directly.)
      __u32 row = svc->id * L4_MAX_ENDPOINTS + f->ep_index;
      struct l4_ep* fe = f->ep_index < L4_MAX_ENDPOINTS ? bpf_map_lookup_elem(&endpoints, &row) : 0;
      if (!fe || !fe->up || fe->ip != f->nat_ip || fe->port != f->nat_port ||
          f->ep_index >= svc->n_eps) {
        bpf_map_delete_elem(&ct, &k);
        f = 0;
      }
    }
    if (f) {
      // The client's SYN again, its endpoint up and the rule's, no answer yet, half a second or
      // more after the last: a connect gone unanswered (passive health; once a flow).
      if ((tcp_flags & 2) && f->state == L4_CT_SYN && (f->flags & L4_FLOW_CONNECT) &&
          !(f->flags & (L4_FLOW_DSR | L4_FLOW_RETRIED)) &&
          (__s64)(now - f->last_ns) >= (__s64)(NS_PER_S / 2)) {
        f->flags |= L4_FLOW_RETRIED;
        connect_outcome(row_of(f), L4_UNANSWERED);
      }
      f->last_ns = now;
      if ((tcp_flags & 2) && f->state == L4_CT_CLOSING) {  // the client reuses the 4-tuple
        f->state = L4_CT_SYN;
        f->fins = 0;
        f->flags = (f->flags & ~L4_FLOW_RETRIED) | L4_FLOW_CONNECT;
      }
      if (f->flags & L4_FLOW_DSR) {  // (only the client's side passes here)
        if (f->state == L4_CT_SYN && !(tcp_flags & 2)) f->state = L4_CT_OPEN;  // it was answered
        // (a client's FIN may be a half-close with the answer still to come: only an RST, or
        // idling out, ends the flow)
        note_flags(f, tcp_flags & 4, L4_FIN_CLIENT);
        return send(skb, SEND_DSR, f->nat_ip, f->svc_id, row_of(f), bytes, tos);
      }
      note_flags(f, tcp_flags, L4_FIN_CLIENT);
      const __u32 ep_ip = f->nat_ip, src_ip = f->peer_ip, row = row_of(f), f_svc = f->svc_id;
      const __u16 ep_port = f->nat_port, src_port = f->peer_port;
      // Its reverse entry, should the LRU have evicted it: answers would leave unrewritten. One
      // another flow has taken meanwhile (its port looked free): this flow's answers would go to
      // that flow's client, so it ends here.
      struct l4_flow_key rk = {
          .saddr = ep_ip, .daddr = src_ip, .sport = ep_port, .dport = src_port, .proto = proto};
      struct l4_flow* rr = bpf_map_lookup_elem(&rct, &rk);
      if (!rr) {
        struct l4_flow rf = *f;
        rf.nat_ip = daddr;
        rf.nat_port = dport;
        rf.peer_ip = saddr;
        rf.peer_port = sport;
        if (bpf_map_update_elem(&rct, &rk, &rf, BPF_NOEXIST) != 0)
          rr = bpf_map_lookup_elem(&rct, &rk);  // (another flow took it just now: see below)
      }
      if (rr && (rr->peer_ip != saddr || rr->peer_port != sport || rr->nat_ip != daddr ||
                 rr->nat_port != dport)) {
        bpf_map_delete_elem(&ct, &k);
        return drop(svc->id, L4_DROP_NO_PORT);
      }
      if (rewrite(skb, l4_off, proto, IP_DST_OFF, daddr, ep_ip, 2, dport, ep_port) ||
          rewrite(skb, l4_off, proto, IP_SRC_OFF, saddr, src_ip, 0, sport, src_port))
        return TC_ACT_SHOT;
      const int nat_src = src_ip != saddr || src_port != sport;
      return send(skb, nat_src ? SEND_FIB : SEND_STACK, 0, f_svc, row, bytes, tos);
    }
    // An answer of a live flow whose SNAT address and port a service added since then listens
    // on: still an answer (section 3), not a new flow of that service.
    if (!(tcp_flags & 2)) {
      struct l4_flow* ans = bpf_map_lookup_elem(&rct, &k);
      if (ans && ans->generation != svc->generation && reverse_flow(&k, ans, now)) goto reverse;
    }
    // 2. A new flow: a datagram, a SYN (or any packet, when the rule hashes: same endpoint).
    // (a TCP connection this node does not know: no endpoint may answer it)
    if (proto == IPPROTO_TCP && !(tcp_flags & 2) && svc->sel != L4_SEL_HASH)
      return drop(svc->id, L4_DROP_UNTRACKED);
    const int idx = pick(svc, &k, now);
    if (idx < 0) return drop(svc->id, L4_DROP_NO_ENDPOINT);
    __u32 slot = svc->id * L4_MAX_ENDPOINTS + (__u32)idx;
    struct l4_ep* ep = bpf_map_lookup_elem(&endpoints, &slot);
    if (!ep) return TC_ACT_SHOT;
    const struct l4_ep e = *ep;  // (one copy: the control plane may rewrite the row)
    // The source the endpoint will see: the client (mode 0), or the endpoint's SNAT address
    // and a port of the service's range that no flow to this endpoint holds and no service of
    // that address listens on (its answers would be taken for that service's traffic): the
    // client's own port when it is in the range, then L4_SNAT_TRIES - 1 random others (a retry
    // draws new ones). Taken with its reverse entry (take_reverse: two CPUs never get one port).
    // A mode 0 client port taken by a live flow of another VIP on the same endpoint is not
    // taken over: the packet is dropped (the client's SYN retransmissions too, until that flow
    // ends).
    const int dsr = svc->mode == L4_MODE_DSR;
    struct l4_flow nf = {.nat_ip = e.ip,
                         .nat_port = e.port,
                         .peer_ip = saddr,
                         .peer_port = sport,
                         .svc_id = svc->id,
                         .ep_index = (__u16)idx,
                         .last_ns = now,
                         .timeout_s = svc->timeout_s,
                         .generation = svc->generation,
                         .flags = (dsr ? L4_FLOW_DSR : 0) |
                                  (proto == IPPROTO_TCP && (tcp_flags & 2) ? L4_FLOW_CONNECT : 0),
                         .state = proto == IPPROTO_TCP ? L4_CT_SYN : L4_CT_OPEN};
    note_flags(&nf, dsr ? tcp_flags & 4 : tcp_flags, L4_FIN_CLIENT);
    if (!dsr) {
      struct l4_flow rf = nf;  // (the reverse entry: VIP and client)
      rf.nat_ip = daddr;
      rf.nat_port = dport;
      struct l4_flow_key rk = {
          .saddr = e.ip, .daddr = saddr, .sport = e.port, .dport = sport, .proto = proto};
      const int snat = svc->mode != L4_MODE_DNAT;
      if (snat) {
        if (svc->port_n == 0) return drop(svc->id, L4_DROP_NO_PORT);
        rk.daddr = e.snat_ip;
      }
      const __u16 lo = svc->port_lo, n = svc->port_n, own = bpf_ntohs(sport);
      int found = 0;
      for (__u32 i = 0; i < L4_SNAT_TRIES; ++i) {
        if (i > 0 && !snat) break;  // (mode 0: the client's own port only)
        if (snat) {
          if (i == 0 && !(own >= lo && own - lo < n)) continue;
          const __u32 port = i == 0 ? own : lo + bpf_get_prandom_u32() % n;
          rk.dport = bpf_htons((__u16)port);
          struct l4_svc_key lk = {.vip = rk.daddr, .port = rk.dport, .proto = proto};
          if (bpf_map_lookup_elem(&services, &lk)) continue;
        }
        if (take_reverse(&rk, &rf, now)) {
          found = 1;
          break;
        }
      }
      if (!found) return drop(svc->id, L4_DROP_NO_PORT);
      nf.peer_ip = rk.daddr;
      nf.peer_port = rk.dport;
    }
    bpf_map_update_elem(&ct, &k, &nf, BPF_ANY);
    const __u32 row = svc->id * L4_MAX_ENDPOINTS + (__u32)idx;
    if (dsr) return send(skb, SEND_DSR, e.ip, svc->id, row, bytes, tos);
    if (rewrite(skb, l4_off, proto, IP_DST_OFF, daddr, e.ip, 2, dport, e.port) ||
        rewrite(skb, l4_off, proto, IP_SRC_OFF, saddr, nf.peer_ip, 0, sport, nf.peer_port))
      return TC_ACT_SHOT;
    return send(skb, svc->mode == L4_MODE_DNAT ? SEND_STACK : SEND_FIB, 0, svc->id, row, bytes,
                tos);
  }

  // 3. The reverse direction of a tracked flow, endpoint -> the source it saw: the VIP as the
  // source, the client as the destination.
reverse:;
  struct l4_flow* r = bpf_map_lookup_elem(&rct, &k);
  if (!r) return TC_ACT_UNSPEC;
  const __u64 r_seen = r->last_ns;
  const __u32 vip = r->nat_ip, client_ip = r->peer_ip;
  const __u16 vport = r->nat_port, client_port = r->peer_port;
  struct l4_flow_key ck = {
      .saddr = client_ip, .daddr = vip, .sport = client_port, .dport = vport, .proto = proto};
  struct l4_flow* f = bpf_map_lookup_elem(&ct, &ck);
  struct l4_svc_key vk = {.vip = vip, .port = vport, .proto = proto};
  struct l4_svc* vs = bpf_map_lookup_elem(&services, &vk);
  const int nat_src = client_ip != daddr || client_port != dport;  // modes 1 and 2
  // Stale (idle, or its rule deleted or replaced), or, mode 0, a SYN-ACK to a flow that has
  // closed: a direct connection between the client and the endpoint that reuses the port of a
  // closed flow. Not ours. (A SYN-ACK to an open flow is a retransmission: ours.)
  if (!f || !vs || vs->generation != f->generation || f->nat_ip != saddr || f->nat_port != sport ||
      f->peer_ip != daddr || f->peer_port != dport || expired(f, now) ||
      (!nat_src && (tcp_flags & 8) && f->state == L4_CT_CLOSING)) {
    // (an entry under a second old with no ct entry yet may be a flow another CPU is making:
    // left to it)
    // (under the key's lock, and only the entry judged: one a CPU has just taken for a new
    // flow is left alone)
    if ((f || (__s64)(now - r_seen) >= (__s64)NS_PER_S) &&
        bpf_map_update_elem(&claims, &k, &now, BPF_NOEXIST) == 0) {
      struct l4_flow* again = bpf_map_lookup_elem(&rct, &k);
      if (again && again->last_ns == r_seen) bpf_map_delete_elem(&rct, &k);
      bpf_map_delete_elem(&claims, &k);
    }
    return TC_ACT_UNSPEC;
  }
  f->last_ns = now;
  const __u32 f_svc = f->svc_id, row = row_of(f);
  if (f->state == L4_CT_SYN && (f->flags & L4_FLOW_CONNECT)) {  // (passive health: the outcome)
    if (tcp_flags & 4)
      connect_outcome(row, L4_REFUSED);
    else if (tcp_flags & 8)
      connect_outcome(row, L4_ANSWERED);
  }
  if (f->state == L4_CT_SYN) f->state = L4_CT_OPEN;
  note_flags(f, tcp_flags, L4_FIN_ENDPOINT);
  if (rewrite(skb, l4_off, proto, IP_SRC_OFF, saddr, vip, 0, sport, vport) ||
      rewrite(skb, l4_off, proto, IP_DST_OFF, daddr, client_ip, 2, dport, client_port))
    return TC_ACT_SHOT;
  return send(skb, nat_src ? SEND_FIB : SEND_STACK, 0, f_svc, row, bytes, tos);
}
