// SequenceTracker: what to do with each KV-event batch of one publisher, by its sequence number.
//
// vLLM (and SGLang, a copy of it) number every batch of a publisher process from 0, one by one
// (shared/reference/engines.md §1.3). The rules (issue 10, llm-d's subscriber, seed 000):
//  - the first batch seen sets the baseline and is applied;
//  - the next number is applied; a number already applied again is a duplicate (ignored);
//  - a number going back is a publisher restart: clear the worker's inventory, replay the
//    restarted publisher's batches before this one (from 0) when a replay socket exists, then
//    apply this batch;
//  - a gap (batches lost) is replayed from the replay socket when there is one, then this batch is
//    applied; the inventory is cleared only when the replay cannot cover the gap (its oldest
//    buffered batch is past the first missing one). Without a replay socket a gap of at most
//    kMaxKeptGap batches keeps the inventory (a few lost stores cost a few misses), a larger one
//    clears it (too much may be stale).
// Pure logic: the subscriber does the I/O and reports back (replayDone).
#pragma once
#include <cstdint>

namespace kvgate::events {

class SequenceTracker {
 public:
  static constexpr uint64_t kMaxKeptGap = 64;

  struct Decision {
    bool apply = false;   // apply the batch (after the replay, when there is one)
    bool clear = false;   // clear the worker's inventory first
    bool replay = false;  // replay batches [replay_from, replay_to] first
    uint64_t replay_from = 0;
    uint64_t replay_to = 0;
    bool restart = false;  // the publisher restarted (for metrics)
    uint64_t lost = 0;     // batches missing before this one (for metrics)
  };

  // A live batch with sequence `seq`. `can_replay`: the publisher has a replay socket.
  Decision onBatch(uint64_t seq, bool can_replay) {
    Decision d;
    if (!started_) {
      started_ = true;
      last_ = seq;
      d.apply = true;
      return d;
    }
    if (seq == last_ + 1) {
      last_ = seq;
      d.apply = true;
      return d;
    }
    // A duplicate: nothing to do. (A publisher that restarts right after its first batch sends
    // batch 0 again and is taken for a duplicate: that one batch is lost and the blocks of the
    // old process's single batch stay until evicted. Telling them apart would need the payload.)
    if (seq == last_) return d;
    if (seq < last_) {  // the publisher restarted: its numbering began again at 0
      d.restart = true;
      d.clear = true;
      d.apply = true;
      if (can_replay && seq > 0) {
        d.replay = true;
        d.replay_from = 0;
        d.replay_to = seq - 1;
      }
      last_ = seq;
      return d;
    }
    d.lost = seq - last_ - 1;  // a gap
    d.apply = true;
    if (can_replay) {
      d.replay = true;
      d.replay_from = last_ + 1;
      d.replay_to = seq - 1;
    } else if (d.lost > kMaxKeptGap) {
      d.clear = true;
    }
    last_ = seq;
    return d;
  }

  // The replay of [from, to] returned batches starting at `oldest` (none: oldest > to). When it
  // does not reach back to `from`, history is lost: the caller must clear the inventory before
  // applying what the replay returned.
  static bool replayCovers(uint64_t from, uint64_t oldest) { return oldest <= from; }

  // After a replay of [from, to]: the publisher's batches up to `to` are accounted for (applied,
  // or given up with the inventory cleared); the live batches held meanwhile go through onBatch.
  void resumeAfter(uint64_t to) {
    started_ = true;
    last_ = to;
  }
  // Forget the publisher (reconnect to a possibly restarted engine): the next batch is a baseline.
  void reset() { started_ = false; }
  bool started() const { return started_; }
  uint64_t last() const { return last_; }

 private:
  bool started_ = false;
  uint64_t last_ = 0;
};

}  // namespace kvgate::events
