// A TCP relay that adds one-way delay: every chunk read from either side is written to the other
// no earlier than `delay` after it was read, in order. Stands in for tc netem's delay where the
// kernel has no sch_netem (this machine's does not): a relay inside a network namespace gives a
// remote peer a round trip of 2 x delay plus the relay's own cost (measured; the quota bench
// prints the RTT it saw). Used by `kvgate bench relay`, the quota-store benchmark and tests.
//
// One thread, epoll + a timerfd armed for the earliest chunk due. Bounds: each direction holds at
// most kMaxQueuedBytes (plus one socket buffer read when its peer hangs up); past that the relay
// stops reading from that side (TCP flow control pushes back on the sender): at most kMaxConns
// pairs x 2 x 1 MiB, 2 GiB in the worst case, for a tool of tests and benchmarks. More pairs are
// refused (closed at accept); out of descriptors, it stops accepting until a pair closes. A peer
// that hangs up or resets: what it sent still reaches the other side (delayed), then the pair
// closes. Stops (stop() or the destructor) closing every socket.
#pragma once
#include <cstdint>
#include <string>
#include <thread>

#include "common/net.h"
#include "common/result.h"

namespace kvgate::bench {

class DelayRelay {
 public:
  static constexpr size_t kMaxQueuedBytes = 1u << 20;
  static constexpr size_t kMaxConns = 1024;
  DelayRelay(net::HostPort listen, net::HostPort upstream, int64_t delay_ns);
  ~DelayRelay();
  DelayRelay(const DelayRelay&) = delete;
  DelayRelay& operator=(const DelayRelay&) = delete;
  // Binds (port 0: a free one) and starts the thread; the bound port.
  Result<uint16_t> start();
  void stop();

 private:
  void run();
  net::HostPort listen_, upstream_;
  int64_t delay_ns_;
  int listen_fd_ = -1, epoll_fd_ = -1, timer_fd_ = -1, stop_fd_ = -1;
  std::thread thread_;
};

// kvgate bench relay --listen HOST:PORT --upstream HOST:PORT --delay-us N: runs until SIGINT or
// SIGTERM.
int relayMain(int argc, char** argv);

}  // namespace kvgate::bench
