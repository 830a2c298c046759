// Sockmap relay (issue 33 §2): the steady-state body bytes of an eligible plaintext HTTP/1.1
// mode-4 rule spliced in the kernel from one socket to its peer, while the gateway still reads
// and routes every head.
//
// Algorithm. The gateway reads the engine's response head itself, then, for the rest of a
// Content-Length body, arms the engine's socket (the source) with `remaining` = the body bytes it
// has not read and the client's socket (the target, in `targets`, no programs) and only then puts
// the source in `sources`: from that moment every byte the source receives comes here in order,
// those already waiting in its receive queue first (the gateway raises a data-ready after the
// insert), so nothing the gateway still had to read can be overtaken. Each piece is redirected
// to the target's send side and taken off `remaining` (the stream parser cuts the body into
// messages of at most msg_max bytes, the last ending at the body's end); at 0 a `done`
// notice goes to the gateway (`notices`, a ring buffer), which takes the source out of `sources`
// again. A redirect the kernel refuses (the target gone) is dropped with an `overrun` notice: the
// gateway cuts both connections. Bytes after the body (an engine breaking HTTP/1.1 framing) are
// passed and counted in `counts`: the connection is not pooled. (A stream parser, not a bare
// verdict program: the bare one takes whole skbs from the receive queue, the part the gateway had
// read included; the parser reads from the read position.) Knobs: none here; the gateway arms a
// relay only for bodies of at least --sockmap-min-bytes.
// clang-format off
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
// clang-format on

#include "sockmap/sockmap_maps.h"

struct {
  __uint(type, BPF_MAP_TYPE_SOCKHASH);
  __uint(max_entries, SOCKMAP_MAX_SOCKETS);
  __type(key, __u64);
  __type(value, __u64);
} sources SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_SOCKHASH);
  __uint(max_entries, SOCKMAP_MAX_SOCKETS);
  __type(key, __u64);
  __type(value, __u64);
} targets SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, SOCKMAP_MAX_SOCKETS);
  __type(key, __u64);
  __type(value, struct relay_state);
} relays SEC(".maps");

// Bytes passed after the armed body (only this program writes them while armed).
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, SOCKMAP_MAX_SOCKETS);
  __type(key, __u64);
  __type(value, __u64);
} counts SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, SOCKMAP_NOTICE_BYTES);
} notices SEC(".maps");

static __always_inline void notify(__u64 cookie, __u32 kind, __u64 bytes) {
  struct relay_notice* n = bpf_ringbuf_reserve(&notices, sizeof(*n), 0);
  if (!n) return;  // (full: the gateway's wait ends by its deadline instead)
  n->cookie = cookie;
  n->kind = kind;
  n->pad = 0;
  n->bytes = bytes;
  bpf_ringbuf_submit(n, 0);
}

// The stream parser: each message is the next min(remaining, msg_max) body bytes (past the body:
// one byte at a time, for the gateway to count). msg_max (the gateway's: at most SOCKMAP_MSG_MAX
// and a quarter of the socket's receive buffer) keeps a message within the receive window, which
// strparser needs whole before it delivers it. Its length is kept for the verdict:
// a program sees the whole first skb, bytes before the message's offset included, so skb->len
// is not the message's length.
SEC("sk_skb/stream_parser")
int relay_parser(struct __sk_buff* skb) {
  __u64 cookie = bpf_get_socket_cookie(skb);
  struct relay_state* r = bpf_map_lookup_elem(&relays, &cookie);
  if (!r) return 1;
  __u64 len = r->remaining;
  __u64 most = r->msg_max ? r->msg_max : 4096;
  if (len == 0) len = 1;
  if (len > most) len = most;
  r->pending = len;
  return (int)len;
}

SEC("sk_skb/stream_verdict")
int relay_verdict(struct __sk_buff* skb) {
  __u64 cookie = bpf_get_socket_cookie(skb);
  struct relay_state* r = bpf_map_lookup_elem(&relays, &cookie);
  if (!r) return SK_PASS;
  __u64 len = r->pending;
  if (r->remaining == 0) {  // past the body: counted (the gateway will not pool it)
    __u64* passed = bpf_map_lookup_elem(&counts, &cookie);
    if (passed) __sync_fetch_and_add(passed, len);
    return SK_PASS;
  }
  if (len > r->remaining) {  // (the parser cut it to the body: a guard)
    r->remaining = 0;
    notify(cookie, SOCKMAP_NOTICE_OVERRUN, r->relayed);
    return SK_DROP;
  }
  __u64 peer = r->peer;
  long v = bpf_sk_redirect_hash(skb, &targets, &peer, 0);
  if (v != SK_PASS) {  // the target is gone
    r->remaining = 0;
    notify(cookie, SOCKMAP_NOTICE_GONE, r->relayed);
    return SK_DROP;
  }
  r->relayed += len;
  r->remaining -= len;
  if (r->remaining == 0) notify(cookie, SOCKMAP_NOTICE_DONE, r->relayed);
  return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
