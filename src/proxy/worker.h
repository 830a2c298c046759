// Internal to the data plane: a worker thread (event loop + upstream pool) and a VIP listener.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "http/asio.h"
#include "proxy/data_plane.h"
#include "proxy/loop_probe.h"
#include "proxy/route_table.h"
#include "proxy/upstream_pool.h"

namespace kvgate::proxy {

class ClientConn;

class Worker {
 public:
  Worker(const ProxyOptions& opts, DataPlaneStats& stats, const governance::Services& gov)
      : opts(opts),
        stats(stats),
        gov(gov),
        pool(opts.max_idle_per_endpoint, opts.upstream_idle_timeout, stats),
        work(asio::make_work_guard(io)) {}
  // (after the thread is joined) The idle upstream sockets go first, while the io_context lives;
  // then the io_context (declared after the pool and the connection set, so destroyed before
  // them) destroys the frames still suspended in it - a drain that timed out - whose cleanup
  // (the connection set, quota settlement) still finds everything alive.
  ~Worker() {
    work.reset();
    pool.closeAll();
  }
  // A receive buffer of this thread's, for a reader that hands the bytes on before it can
  // suspend (an HTTP/2 connection's frames go to libnghttp2 at once), so that no connection holds
  // a read buffer while it waits. Never held across a co_await; a nested taker (none today) gets
  // a buffer of its own.
  static constexpr size_t kScratchBytes = 16 * 1024;
  class Scratch {
   public:
    explicit Scratch(Worker& w) : w_(w) {
      if (w.scratch_busy_) {
        own_ = std::make_unique<char[]>(kScratchBytes);
        p_ = own_.get();
        return;
      }
      if (!w.scratch_) w.scratch_ = std::make_unique<char[]>(kScratchBytes);
      w.scratch_busy_ = true;
      p_ = w.scratch_.get();
    }
    ~Scratch() {
      if (!own_) w_.scratch_busy_ = false;
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    char* data() const { return p_; }
    static constexpr size_t size() { return kScratchBytes; }

   private:
    Worker& w_;
    std::unique_ptr<char[]> own_;
    char* p_ = nullptr;
  };

  const ProxyOptions& opts;
  DataPlaneStats& stats;  // shared by all workers (atomics)
  // Credentials, limits and quota counters the request gates use (the data plane's, injected).
  const governance::Services& gov;
  UpstreamPool pool;      // touched only on this worker's thread
  // Live client connections of this worker (this thread only), for draining on shutdown.
  std::unordered_set<ClientConn*> conns;
  bool draining = false;  // this thread only: set by DataPlane::drain()
  // This thread only: when a starved upstream connect was last logged (rate limit).
  std::chrono::steady_clock::time_point starved_logged{};
  std::chrono::steady_clock::time_point internal_error_logged{};  // (same, for internal errors)
  // How late this worker's event loop ran a timer due every 100 ms (loopLagProbe): 10 us .. 600
  // ms buckets (kvgate_worker_loop_lag_seconds{worker}). Written by this thread, read by scrapes.
  metrics::Histogram loop_lag{0.01};
  LoopStats loop_stats;  // stalls by cause, CPU and CPU-wait time (proxy/loop_probe.h)
  // The prompt tokenizer (serve --models-dir; null without): quota reservations count with it.
  // Set by DataPlane::setKv before the first rule (no request reads it earlier).
  const routing::PromptTokens* prompt_tokens = nullptr;
  // The same tokenizers, for /tokenize and /detokenize answered here (DataPlane::setTokenizers).
  const tok::RequestTokenizer* tokenizers = nullptr;
  // One thread runs this context, and only it starts, performs or cancels I/O on the worker's
  // sockets (other threads post to it): the reactor's per-socket locking is off (UNSAFE_IO), the
  // scheduler's stays on for those posts.
  asio::io_context io{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::thread thread;

 private:
  std::unique_ptr<char[]> scratch_;  // Scratch's (this thread only)
  bool scratch_busy_ = false;
};

struct Listener {
  std::string key;  // vip:port
  tcp::endpoint endpoint;
  std::atomic<std::shared_ptr<const VipConfig>> config;
  std::vector<std::shared_ptr<tcp::acceptor>> acceptors;  // one per worker, same index
  std::atomic<bool> closed{false};  // rules removed: open connections close after their request
  StatusCounters unrouted;          // answers given before an endpoint was chosen
};

// Accept loop of one worker for one listener; each connection runs serveClient().
asio::awaitable<void> acceptLoop(Worker& w, std::shared_ptr<Listener> l,
                                 std::shared_ptr<tcp::acceptor> acc);
asio::awaitable<void> serveClient(Worker& w, std::shared_ptr<Listener> l, tcp::socket sock,
                                  tcp::endpoint peer);
// Every second: reap the worker's idle upstream connections.
asio::awaitable<void> poolSweeper(Worker& w);
// On the worker's thread: stop taking new requests, close idle client connections.
void drainWorker(Worker& w);

}  // namespace kvgate::proxy
