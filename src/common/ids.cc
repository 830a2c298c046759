#include "common/ids.h"

#include <bit>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace kvgate {
namespace {
// splitmix64 seeded per thread from the clock, the thread id and a random_device draw.
struct Rng {
  uint64_t state;
  Rng() {
    std::random_device rd;
    state = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
            static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
            std::hash<std::thread::id>{}(std::this_thread::get_id());
  }
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
};
thread_local Rng t_rng;
constexpr char kHex[] = "0123456789abcdef";
// Eight hex digits of 32 bits, most significant first: each nibble spread into its own byte,
// then '0'-'9' / 'a'-'f' added to all eight at once.
inline void hex32(uint32_t v, char* out) {
  uint64_t x = v;
  x = ((x & 0xFFFF0000ULL) << 16) | (x & 0xFFFFULL);
  x = ((x & 0x0000FF000000FF00ULL) << 8) | (x & 0x000000FF000000FFULL);
  x = ((x & 0x00F000F000F000F0ULL) << 4) | (x & 0x000F000F000F000FULL);
  const uint64_t letters = ((x + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;  // > 9
  x += 0x3030303030303030ULL + letters * ('a' - '0' - 10);
  if constexpr (std::endian::native == std::endian::little)
    x = __builtin_bswap64(x);  // the most significant nibble first in memory
  std::memcpy(out, &x, 8);
}
}  // namespace

void hex64(uint64_t v, char out[16]) {
  hex32(static_cast<uint32_t>(v >> 32), out);
  hex32(static_cast<uint32_t>(v), out + 8);
}

void newRequestId(char out[32]) {
  hex64(t_rng.next(), out);
  hex64(t_rng.next(), out + 16);
}

std::string newRequestId() {
  std::string s(32, '0');
  newRequestId(s.data());
  return s;
}

std::string newUuidV4() {
  char h[32];
  newRequestId(h);
  h[12] = '4';                           // version 4
  h[16] = kHex[8 + (t_rng.next() & 3)];  // variant 10xx
  std::string s;
  s.append(h, 8).append("-").append(h + 8, 4).append("-").append(h + 12, 4).append("-");
  s.append(h + 16, 4).append("-").append(h + 20, 12);
  return s;
}

bool isAcceptableRequestId(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (unsigned char c : s)
    if (c <= 0x20 || c >= 0x7f) return false;
  return true;
}

}  // namespace kvgate
