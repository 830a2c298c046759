// The records the sockmap relay program (bpf/sockmap_relay.bpf.c) and its control
// (sockmap_relay.cc) share. Plain C: both compilers read it.
#pragma once
#include <linux/types.h>

#define SOCKMAP_MAX_SOCKETS 65536
#define SOCKMAP_NOTICE_BYTES (256 * 1024)
/* A stream parser message must stay under the socket's receive buffer (strparser: EMSGSIZE) */
#define SOCKMAP_MSG_MAX (64 * 1024)

#define SOCKMAP_NOTICE_DONE 1    /* the body went through whole */
#define SOCKMAP_NOTICE_OVERRUN 3 /* bytes beyond the body in one piece: cut */
#define SOCKMAP_NOTICE_GONE 5    /* the target socket refused the redirect: cut */

struct relay_state {
  __u64 peer;      /* the target socket's cookie */
  __u64 remaining; /* body bytes the kernel still relays; 0: done */
  __u64 relayed;   /* bytes relayed in this arming */
  __u64 pending;   /* the length of the message the parser cut last */
  __u64 msg_max;   /* the parser's message bound for this socket */
};

struct relay_notice {
  __u64 cookie;
  __u32 kind;
  __u32 pad;
  __u64 bytes;
};
