// The L4 data path (issue 33): classic load balancing of TCP and UDP services at tc ingress.
//
// Algorithm, per IPv4 packet on an interface named by `serve --l4-ifaces`:
//   1. A packet of a tracked flow (ct: client -> VIP) is DNAT-ed to the flow's endpoint.
//   2. A packet to a service (services: VIP, port, protocol) with no flow starts one: the
//      endpoint is picked by the rule's sel (0 round-robin, 1 hash of the client's address and
//      port, 2 weighted: the weights' cumulative table), skipping endpoints the control plane
//      marked down; the flow and its reverse (rct: endpoint -> client) are recorded.
//   3. A packet of a tracked flow's reverse direction (endpoint -> client) gets the VIP and
//      port back as its source (mode 0, DNAT: the endpoint routes its answers through this
//      node).
// A flow stays on its endpoint while it is tracked: endpoint-set changes do not move it; an
// entry idle longer than the service's timeout (inactiveTimeOut, default 120 s for TCP, 30 s for
// UDP; 10 s after a TCP FIN or RST) counts as gone. Both tables are LRU: a flood of new flows
// evicts the oldest, never grows memory. Per-service packet and byte counters (per CPU).
// Knobs: only the maps, programmed by the control plane (src/l4/l4_plane.cc) on each rule
// commit; the program is never reloaded for a rule change.
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>

#include "../l4_maps.h"

char LICENSE[] SEC("license") = "GPL";

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, L4_MAX_SERVICES);
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

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, L4_MAX_SERVICES);
  __type(key, __u32);
  __type(value, struct l4_counters);
} counters SEC(".maps");

#define IP_CSUM_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, check))
#define IP_SRC_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, saddr))
#define IP_DST_OFF (ETH_HLEN + __builtin_offsetof(struct iphdr, daddr))

static __always_inline __u32 mix(__u32 h, __u32 v) {
  h ^= v;
  h *= 0x9e3779b1u;
  return h ^ (h >> 15);
}

// Rewrites the address at ip_off and the port at l4_off + port_off, checksums included.
static __always_inline int rewrite(struct __sk_buff* skb, __u32 l4_off, __u8 proto, __u32 ip_off,
                                   __u32 old_ip, __u32 new_ip, __u32 port_off, __u16 old_port,
                                   __u16 new_port) {
  const __u32 csum_off = l4_off + (proto == IPPROTO_TCP ? __builtin_offsetof(struct tcphdr, check)
                                                        : __builtin_offsetof(struct udphdr, check));
  const __u64 mangled = proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
  if (bpf_l4_csum_replace(skb, csum_off, old_ip, new_ip, BPF_F_PSEUDO_HDR | mangled | 4)) return -1;
  if (bpf_l3_csum_replace(skb, IP_CSUM_OFF, old_ip, new_ip, 4)) return -1;
  if (bpf_skb_store_bytes(skb, ip_off, &new_ip, 4, 0)) return -1;
  if (old_port != new_port) {
    if (bpf_l4_csum_replace(skb, csum_off, old_port, new_port, mangled | 2)) return -1;
    if (bpf_skb_store_bytes(skb, l4_off + port_off, &new_port, 2, 0)) return -1;
  }
  return 0;
}

static __always_inline void count(__u32 svc_id, __u32 bytes) {
  struct l4_counters* c = bpf_map_lookup_elem(&counters, &svc_id);
  if (c) {
    c->packets += 1;
    c->bytes += bytes;
  }
}

static __always_inline int pick(struct l4_svc* svc, const struct l4_flow_key* k) {
  const __u32 n = svc->n_eps;
  if (n == 0 || n > L4_MAX_ENDPOINTS) return -1;
  __u32 start;
  if (svc->sel == L4_SEL_HASH)
    start = mix(mix(mix(0x12345u, k->saddr), k->sport), k->proto) % n;
  else
    start = __sync_fetch_and_add(&svc->rr, 1) % n;
  if (svc->sel == L4_SEL_WEIGHTED && svc->total_weight > 0) {
    // the cumulative weights: the first endpoint whose bound exceeds a turn of the counter
    const __u32 turn = start % svc->total_weight;
    for (__u32 i = 0; i < L4_MAX_ENDPOINTS; ++i) {
      if (i >= n) break;
      __u32 slot = svc->id * L4_MAX_ENDPOINTS + i;
      struct l4_ep* e = bpf_map_lookup_elem(&endpoints, &slot);
      if (e && e->up && turn < e->cum_weight) return (int)i;
    }
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

static __always_inline __u64 idle_limit_ns(const struct l4_flow* f) {
  if (f->state == L4_CT_CLOSING) return 10ull * 1000000000ull;
  return (__u64)f->timeout_s * 1000000000ull;
}

SEC("tc")
int l4_ingress(struct __sk_buff* skb) {
  void* data = (void*)(long)skb->data;
  void* end = (void*)(long)skb->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP)) return TC_ACT_OK;
  struct iphdr* ip = (void*)(eth + 1);
  if ((void*)(ip + 1) > end || ip->ihl < 5) return TC_ACT_OK;
  if (ip->frag_off & bpf_htons(0x3fff)) return TC_ACT_OK;  // fragments: not ours to track
  const __u8 proto = ip->protocol;
  if (proto != IPPROTO_TCP && proto != IPPROTO_UDP) return TC_ACT_OK;
  const __u32 l4_off = ETH_HLEN + ip->ihl * 4;
  __u16 sport, dport;
  __u8 tcp_flags = 0;
  if (proto == IPPROTO_TCP) {
    struct tcphdr* th = (void*)ip + ip->ihl * 4;
    if ((void*)(th + 1) > end) return TC_ACT_OK;
    sport = th->source;
    dport = th->dest;
    tcp_flags = (th->fin ? 1 : 0) | (th->rst ? 4 : 0) | (th->syn ? 2 : 0);
  } else {
    struct udphdr* uh = (void*)ip + ip->ihl * 4;
    if ((void*)(uh + 1) > end) return TC_ACT_OK;
    sport = uh->source;
    dport = uh->dest;
  }
  const __u64 now = bpf_ktime_get_ns();
  const __u32 saddr = ip->saddr, daddr = ip->daddr, bytes = skb->len;
  struct l4_flow_key k = {
      .saddr = saddr, .daddr = daddr, .sport = sport, .dport = dport, .proto = proto};

  // 1. A tracked flow, client -> VIP.
  struct l4_flow* f = bpf_map_lookup_elem(&ct, &k);
  if (f && now - f->last_ns > idle_limit_ns(f)) {  // idle past its timeout: gone
    bpf_map_delete_elem(&ct, &k);
    f = 0;
  }
  if (f) {
    struct l4_svc_key sk = {.vip = daddr, .port = dport, .proto = proto};
    struct l4_svc* svc = bpf_map_lookup_elem(&services, &sk);
    if (!svc || svc->generation != f->generation) {  // the service went (or was replaced)
      bpf_map_delete_elem(&ct, &k);
      return TC_ACT_OK;
    }
    f->last_ns = now;
    if (tcp_flags & 5) f->state = L4_CT_CLOSING;
    const __u32 ep_ip = f->nat_ip;
    const __u16 ep_port = f->nat_port;
    count(f->svc_id, bytes);
    if (rewrite(skb, l4_off, proto, IP_DST_OFF, daddr, ep_ip, 2, dport, ep_port))
      return TC_ACT_SHOT;
    return TC_ACT_OK;
  }

  // 2. A new flow to a service.
  struct l4_svc_key sk = {.vip = daddr, .port = dport, .proto = proto};
  struct l4_svc* svc = bpf_map_lookup_elem(&services, &sk);
  if (svc) {
    const int idx = pick(svc, &k);
    if (idx < 0) {  // no endpoint up: refused, as a closed port would
      count(svc->id, bytes);
      return TC_ACT_SHOT;
    }
    __u32 slot = svc->id * L4_MAX_ENDPOINTS + (__u32)idx;
    struct l4_ep* e = bpf_map_lookup_elem(&endpoints, &slot);
    if (!e) return TC_ACT_SHOT;
    struct l4_flow nf = {.nat_ip = e->ip,
                         .nat_port = e->port,
                         .svc_id = svc->id,
                         .ep_index = (__u16)idx,
                         .last_ns = now,
                         .timeout_s = svc->timeout_s,
                         .generation = svc->generation,
                         .state = (tcp_flags & 5) ? L4_CT_CLOSING : L4_CT_OPEN};
    bpf_map_update_elem(&ct, &k, &nf, BPF_ANY);
    struct l4_flow_key rk = {
        .saddr = e->ip, .daddr = saddr, .sport = e->port, .dport = sport, .proto = proto};
    struct l4_flow rf = nf;
    rf.nat_ip = daddr;
    rf.nat_port = dport;
    bpf_map_update_elem(&rct, &rk, &rf, BPF_ANY);
    count(svc->id, bytes);
    if (rewrite(skb, l4_off, proto, IP_DST_OFF, daddr, e->ip, 2, dport, e->port))
      return TC_ACT_SHOT;
    return TC_ACT_OK;
  }

  // 3. The reverse direction of a tracked flow, endpoint -> client: the VIP as the source.
  struct l4_flow* r = bpf_map_lookup_elem(&rct, &k);
  if (r) {
    if (now - r->last_ns > idle_limit_ns(r) + 10ull * 1000000000ull) {
      bpf_map_delete_elem(&rct, &k);
      return TC_ACT_OK;
    }
    r->last_ns = now;
    if (tcp_flags & 5) r->state = L4_CT_CLOSING;
    const __u32 vip = r->nat_ip;
    const __u16 vport = r->nat_port;
    count(r->svc_id, bytes);
    if (rewrite(skb, l4_off, proto, IP_SRC_OFF, saddr, vip, 0, sport, vport)) return TC_ACT_SHOT;
  }
  return TC_ACT_OK;
}
