#include "common/ids.h"

#include <chrono>
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
void hex64(uint64_t v, char* out) {
  for (int i = 15; i >= 0; --i) {
    out[i] = kHex[v & 0xF];
    v >>= 4;
  }
}
}  // namespace

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
