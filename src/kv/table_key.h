// The per-process secret of the KV tables' slot functions (issue 28 §1.6: hash flooding).
//
// Block fingerprints are a public contract (a fixed seed: the hint service and the engines agree
// on them), and clients choose the token ids they are computed from; the hint index's keys are
// chosen by its clients outright. A slot function known to a client lets it grind inputs that
// land in one probe cluster, so every lookup walks the cluster. The tables therefore place a key
// by a keyed mix, wyhash's folded 128-bit multiply of (key ^ a) by (b | 1), with (a, b) drawn
// from the kernel's random source once per process: slots are unpredictable without the secret,
// while the fingerprints themselves stay the contract. BlockTable additionally bounds probes
// (kMaxProbe), so even a collision found by chance costs a bounded walk.
#pragma once
#include <cstdint>

namespace kvgate::kv {

struct TableKey {
  uint64_t a = 0, b = 0;
};

// Random at first use (getrandom; a failure falls back to the clock and the address space
// layout, still unknown to clients), then fixed for the process.
const TableKey& tableKey();

inline uint64_t keyedMix(uint64_t k, const TableKey& key) {
  const unsigned __int128 p = static_cast<unsigned __int128>(k ^ key.a) * (key.b | 1);
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

}  // namespace kvgate::kv
