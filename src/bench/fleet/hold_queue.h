// What the fleet benchmark's direct arms decide with (no gateway in the path):
//
// OracleMemory: what this harness itself sent where, as 16-token block chains per worker with an
// expiry (the oracle arms keep 2 s, the gateway's speculative-insert TTL; the hold arms 600 s, so
// without eviction it is exact).
//
// HoldQueue: the hold experiment (arms hold, hold-sjf, hold-free; issue 29: what would late
// binding at the gateway buy near saturation?). Arrived requests wait here and are bound to a
// worker only when it has room. Algorithm, on every event (an arrival, a first byte, a 5 ms tick):
//   - a worker has room while `queued` (the uncached blocks of what was bound there and has not
//     produced a first byte) x block size stays under cap_tokens (KVGATE_HOLD_CAP_TOKENS, default
//     8192: one step's prefill budget of the simulator; hold-free: no cap, so never held);
//   - the waiting requests are taken in arrival order (hold) or fewest uncached blocks first
//     (hold-sjf; ties in arrival order), each bound or skipped, so one that must wait does not
//     stop the others;
//   - the holder is the worker holding most leading blocks of the prompt (ties: less queued);
//     a prompt with a holder goes there when it has room; when it has none for spill
//     (KVGATE_HOLD_SPILL_MS, default 200 ms) it goes to the worker with room and the least
//     queued prefill; a prompt nobody holds goes there at once.
// Single-threaded: the caller runs every call on one io_context.
#pragma once
#include <xxhash.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace kvgate::bench::fleet {

struct OracleMemory {
  using Clock = std::chrono::steady_clock;
  explicit OracleMemory(size_t workers) : credit(workers) {}
  std::vector<std::unordered_map<uint64_t, Clock::time_point>> credit;
  static std::vector<uint64_t> chain(const std::vector<uint32_t>& t, size_t bs) {
    std::vector<uint64_t> c;
    uint64_t parent = 0x6f7261636c65ULL;  // "oracle"
    for (size_t b = 0; bs > 0 && b + bs <= t.size(); b += bs) {
      parent = XXH3_64bits_withSeed(t.data() + b, bs * sizeof(uint32_t), parent);
      c.push_back(parent);
    }
    return c;
  }
  // Leading blocks of `c` remembered for worker `w` and not expired at `now`.
  uint32_t leading(size_t w, const std::vector<uint64_t>& c, Clock::time_point now) const {
    uint32_t n = 0;
    while (n < c.size()) {
      auto it = credit[w].find(c[n]);
      if (it == credit[w].end() || it->second < now) break;
      ++n;
    }
    return n;
  }
  void remember(size_t w, const std::vector<uint64_t>& c, Clock::time_point now,
                std::chrono::seconds ttl = std::chrono::seconds(2)) {
    if (credit[w].size() > (1u << 20)) credit[w].clear();  // bounded
    for (uint64_t k : c) credit[w][k] = now + ttl;
  }
};

class HoldQueue {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Order { kArrival, kFewestUncached };
  struct Item {
    std::vector<uint64_t> chain;     // the prompt's block chain
    Clock::time_point arrived;
    std::function<void()> on_bound;  // called once, when bound
    size_t worker = SIZE_MAX;        // the binding
    uint32_t uncached = 0;           // blocks it prefills there
    // Per worker, valid while seen[w] == generation of w (a worker's memory only grows).
    std::vector<uint32_t> overlap;
    std::vector<uint64_t> seen;
  };
  struct Counts {
    size_t bound = 0, waited = 0, spills = 0, cold = 0;
  };

  HoldQueue(size_t workers, size_t block_size, Order order, uint64_t cap_tokens,
            std::chrono::milliseconds spill);
  // The knobs from KVGATE_HOLD_CAP_TOKENS and KVGATE_HOLD_SPILL_MS (unset: the defaults).
  static uint64_t capFromEnv();
  static std::chrono::milliseconds spillFromEnv();

  // `it` must stay where it is until bound (the queue keeps its address).
  void add(Item& it, Clock::time_point now);
  // A request bound to `w` produced its first byte (or ended without one): its blocks leave the
  // queued prefill of `w`.
  void started(size_t w, uint32_t uncached, Clock::time_point now);
  // Binds what can be bound at `now`, in the queue's order.
  void pump(Clock::time_point now);

  size_t waiting() const { return waiting_.size(); }
  uint64_t queued(size_t w) const { return queued_[w]; }
  const Counts& counts() const { return counts_; }
  uint64_t capTokens() const { return cap_tokens_; }
  std::chrono::milliseconds spill() const { return spill_; }

 private:
  bool room(size_t w) const { return queued_[w] * bs_ < cap_tokens_; }
  bool anyRoom() const;
  uint32_t overlapOf(Item& it, size_t w, Clock::time_point now);
  size_t leastQueued() const;
  void bind(Item& it, size_t w, Clock::time_point now);

  OracleMemory mem_;
  std::vector<uint64_t> queued_;
  std::vector<uint64_t> generation_;
  std::vector<Item*> waiting_;
  size_t bs_;
  Order order_;
  uint64_t cap_tokens_;
  std::chrono::milliseconds spill_;
  Counts counts_;
};

}  // namespace kvgate::bench::fleet
