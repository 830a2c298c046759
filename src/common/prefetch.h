// Software prefetch that the optimizer keeps.
//
// GCC counts __builtin_prefetch as free of side effects: a small inline function whose only
// effect is a prefetch (a hash table's `prefetch(key)`) is found to be pure, and the call, whose
// result is unused, is deleted with the prefetch in it (GCC 12 at -O2: the chain walks of the KV
// index and of the hint index lost every table prefetch this way, and each block cost a full
// memory latency). An `asm volatile` is a side effect the optimizer must keep.
#pragma once

namespace kvgate::common {

// Starts loading the cache line holding `p` (read; all cache levels). Never faults.
inline void prefetchRead(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 (%0)" : : "r"(p));
#else
  __builtin_prefetch(p);
  asm volatile("" : : "r"(p) : "memory");
#endif
}

}  // namespace kvgate::common
