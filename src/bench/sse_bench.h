// `kvgate bench sse` (sse_bench.cc): options, results and the event-stamp scanner shared by its
// HTTP/1.1 streams (a connection each) and its HTTP/2 ones (sse_h2.cc: --h2, streams multiplexed
// over connections).
#pragma once
#include <boost/asio/ssl.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "http/asio.h"

namespace kvgate::bench {

struct SseOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  int streams = 100;
  int events = 200;
  int ramp_ms = 2000;
  std::string model = "sim-model";
  std::shared_ptr<asio::ssl::context> tls;  // --tls
  int abort_after = -1;                      // --abort-after K: close after K stamped events
  int h2_streams_per_conn = 0;               // --h2 K: HTTP/2, K streams per connection
};

struct SseStats {
  std::vector<int64_t> delays_us;
  // The same delays split by when the event was sent: while streams still start (the ramp:
  // handshakes and routing interleave with relaying) and after.
  std::vector<int64_t> ramp_us, steady_us;
  int64_t ramp_end_us = 0;
  std::vector<int64_t> setup_us;  // connect (+ TLS handshake) to request written, per stream
  int completed = 0;
  int errors = 0;
  int truncated = 0, connect_failed = 0, aborted = 0;
  std::map<int, int> statuses;  // non-200 answers
  int64_t complete_min_events = -1, complete_max_events = -1;
  // A stream ended: reached [DONE] or not, its status (0: none), its stamped events.
  void ended(bool done, int status, int64_t stamps);
};

int64_t nowUs();  // the wall clock the simulator stamps events with, in microseconds
// Records the delay of every event stamped "kvgate_sent_us" in `buf` (read at `now`) and drops
// what was scanned (a stamp split across reads is kept); returns the events found.
int64_t scanStamps(std::string& buf, int64_t now, SseStats& st);

// Waits for stream `index`'s place in the ramp, then connects to the target (with --tls also the
// handshake, offering `alpn` in ALPN's wire format when given); `setup_from`: when the connect
// began.
asio::awaitable<error_code> openConnection(const SseOptions& o, int index, tcp::socket& s,
                                           std::unique_ptr<asio::ssl::stream<tcp::socket&>>& tls,
                                           int64_t& setup_from, std::string_view alpn = {});

// --h2: the streams of connection `conn` (streams [first, first + count)) over one HTTP/2
// connection (h2c, or h2 by ALPN with --tls).
asio::awaitable<void> h2Connection(const SseOptions& o, int first, int count, SseStats& st);

}  // namespace kvgate::bench
