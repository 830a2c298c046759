// The L4 program's flow hash and sel 1's rendezvous score (bpf/l4_lb.bpf.c), shared with the
// host so a unit test (l4_hash_test.cc) checks the score's fairness and how flows move when an
// endpoint is added or removed. Plain C: compiled by clang's BPF target and by g++ alike.
#pragma once
#include <linux/types.h>

#define L4_INLINE static inline __attribute__((always_inline))

// A 32-bit finalizer (every input bit moves every output bit about half the time): rendezvous
// scores of one flow for different endpoints must not be ordered alike.
L4_INLINE __u32 l4_fmix(__u32 h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

L4_INLINE __u32 l4_mix(__u32 h, __u32 v) {
  h ^= v;
  h *= 0x9e3779b1u;
  return h ^ (h >> 15);
}

// sel 1's hash of a flow: its client address and port and the protocol (network byte order, as
// on the wire).
L4_INLINE __u32 l4_flow_hash(__u32 saddr, __u16 sport, __u8 proto) {
  return l4_mix(l4_mix(l4_mix(0x12345u, saddr), sport), proto);
}

// sel 1: the score of an endpoint (its address and port, network byte order) for a flow; the
// endpoint up scoring highest takes the flow (ties: the first in list order).
L4_INLINE __u32 l4_rendezvous_score(__u32 flow_hash, __u32 ip, __u16 port) {
  return l4_fmix(l4_mix(l4_mix(flow_hash, ip), port));
}
