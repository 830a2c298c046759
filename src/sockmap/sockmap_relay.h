// The sockmap relay's control (issue 33 §2): loads bpf/sockmap_relay.bpf.c once per process,
// registers client sockets as targets, arms one response body at a time on an engine socket and
// hands the program's notices (done, overrun) to whoever armed it.
//
// Use, for a response body of an eligible mode-4 rule (proxy/relay_sockmap.cc):
//   1. the gateway reads the engine's head (and whatever body bytes came with it) and writes the
//      client its head and those bytes;
//   2. the client's socket is registered as a target when first needed (addTarget; kept for the
//      connection's life);
//   3. arm() with the body bytes left: the engine's socket joins the program's map only now, and
//      the bytes waiting in its receive queue go first, so none is overtaken; the kernel sends the
//      rest to the client's socket and a notice ends the wait;
//   4. the Arming's destructor takes the engine's socket out of the map (it is an ordinary socket
//      again for the next exchange) and forgets the records.
// Kernel memory: the kernel queues a relayed body for a slow client without bound, so armed bodies
// share a budget (`serve --sockmap-budget-bytes`, default 256 MiB): a body that does not fit is
// relayed in userspace.
// Loaded by warm() when a rule asks for it (not on a worker's loop); a kernel that refuses leaves
// get() null, loadError() says why, and the rules are relayed in userspace.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

struct sockmap_relay;  // the skeleton
struct ring_buffer;

namespace kvgate::sockmap {

// What ended an armed relay.
enum class Notice : uint32_t { kNone = 0, kDone = 1, kOverrun = 3, kReset = 4, kGone = 5 };
const char* noticeName(Notice n);

class Relay;

// A target socket's registration: forgotten when destroyed (movable, one owner).
class Registration {
 public:
  Registration() = default;
  Registration(Relay* r, uint64_t cookie) : relay_(r), cookie_(cookie) {}
  Registration(Registration&& o) noexcept
      : relay_(o.relay_), cookie_(std::exchange(o.cookie_, 0)) {}
  Registration& operator=(Registration&& o) noexcept;
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  ~Registration() { reset(); }
  void reset();
  uint64_t cookie() const { return cookie_; }
  explicit operator bool() const { return cookie_ != 0; }

 private:
  Relay* relay_ = nullptr;
  uint64_t cookie_ = 0;
};

// One armed body: the source socket is out of the map and its records gone when destroyed.
class Arming {
 public:
  Arming() = default;
  Arming(Arming&& o) noexcept
      : relay_(o.relay_), cookie_(std::exchange(o.cookie_, 0)), bytes_(o.bytes_) {}
  Arming& operator=(Arming&&) = delete;
  Arming(const Arming&) = delete;
  ~Arming();
  explicit operator bool() const { return cookie_ != 0; }
  uint64_t relayed() const;    // bytes relayed so far
  uint64_t remaining() const;  // body bytes not relayed yet (UINT64_MAX: unknown)
  // Takes the source out of the program's map (no byte reaches the program after it); the bytes
  // that came after the body until then (nonzero: the connection is not to be pooled).
  uint64_t detach();

 private:
  friend class Relay;
  Arming(Relay* r, uint64_t cookie, uint64_t bytes) : relay_(r), cookie_(cookie), bytes_(bytes) {}
  Relay* relay_ = nullptr;
  uint64_t cookie_ = 0;
  uint64_t bytes_ = 0;  // taken from the budget
};

class Relay {
 public:
  // Loads the relay if not tried yet (the control thread: loading takes milliseconds).
  static void warm();
  // The process's relay once warm() loaded it; null otherwise (never loads).
  static Relay* get();
  static bool tried();
  static std::string loadError();
  static void setBudget(uint64_t bytes);
  ~Relay();

  // A socket relayed bytes may be sent to (its owner's life).
  Registration addTarget(int fd);
  using Callback = std::function<void(Notice, uint64_t bytes)>;
  // Relays the next `remaining` bytes socket `source_fd` receives (those waiting first) to the
  // target `target`. `cb` runs once, on the notice thread, unless the Arming is gone first.
  // Empty when the budget or the maps refused it (nothing armed; the bytes are the caller's).
  Arming arm(int source_fd, uint64_t target, uint64_t remaining, Callback cb);
  // POST /netlox/v1/config/sockmapreset: every armed relay's callback runs with kReset (their
  // owners cut both connections); the number of them.
  uint64_t resetAll();

  // Bytes socket `fd` has taken into its send queue over its life (acked + still queued): a
  // relayed body has reached the client's socket once this passes what it was at arming plus the
  // body (the kernel sends a redirect from a work queue, after the notice). False on error.
  static bool queuedTotal(int fd, uint64_t& out);
  // The same, exact (the arming's base: an ACK between the two readings would shift it).
  static bool exactQueuedTotal(int fd, uint64_t& out);
  static bool established(int fd);  // the TCP connection is still ESTABLISHED

  // Counters (metrics: kvgate_sockmap_*).
  std::atomic<uint64_t> relays_done{0}, relays_overrun{0}, relays_reset{0}, relays_gone{0},
      over_budget{0};
  std::atomic<uint64_t> bytes_relayed{0}, armed_bytes{0};
  std::atomic<uint64_t> sockets_targets{0}, register_failed{0};

 private:
  friend class Registration;
  friend class Arming;
  Relay() = default;
  bool load(std::string& err);
  void forgetTarget(uint64_t cookie);
  void disarm(uint64_t cookie, uint64_t bytes);
  void noticeLoop();
  static int onNotice(void* ctx, void* data, size_t size);

  struct sockmap_relay* skel_ = nullptr;
  struct ring_buffer* rb_ = nullptr;
  int sources_fd_ = -1, targets_fd_ = -1, relays_fd_ = -1, counts_fd_ = -1;
  mutable std::mutex mu_;  // callbacks_; held while one runs
  std::unordered_map<uint64_t, Callback> callbacks_;
  std::atomic<bool> stop_{false};
  std::thread notices_;
};

}  // namespace kvgate::sockmap
