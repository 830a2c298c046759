// Helpers shared by the unit tests (not linked into kvgate).
#pragma once
#include <chrono>
#include <string>
#include <thread>

namespace kvgate::testing {

inline std::string hex(const std::string& b) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : b) {
    h.push_back(d[c >> 4]);
    h.push_back(d[c & 15]);
  }
  return h;
}

inline std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

// Polls `f` every 10 ms until it holds or `ms` pass (a one-sided bound: busy machines are slow).
template <typename F>
bool waitUntil(F f, int ms = 10000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

}  // namespace kvgate::testing
