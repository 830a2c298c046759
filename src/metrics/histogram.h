// A lock-free fixed-bucket latency histogram (Prometheus semantics: cumulative at exposition).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>

namespace kvgate::metrics {

class Histogram {
 public:
  // Bucket bounds are kBounds x scale: the default covers request latencies (1 ms .. 60 s);
  // a scale of 1e-3 covers in-process decisions (1 us .. 60 ms).
  explicit Histogram(double scale = 1.0) : scale_(scale) {}
  double bound(size_t i) const { return kBounds[i] * scale_; }
  // Upper bounds in seconds: 1 ms .. 60 s, roughly x2.5 apart.
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1,     2.5,  5,     15,   60};
  void observe(double seconds) {
    size_t i = 0;
    while (i < kBounds.size() && seconds > kBounds[i] * scale_) ++i;
    buckets_[i].fetch_add(1, std::memory_order_relaxed);
    // Sum in units of 1 us x scale (1 us for latencies, 1 ns for decisions): enough resolution
    // for the bucket range, and room for centuries of observations in 64 bits.
    sum_units_.fetch_add(static_cast<uint64_t>(seconds * 1e6 / scale_), std::memory_order_relaxed);
  }
  uint64_t bucket(size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }
  double sumSeconds() const { return static_cast<double>(sum_units_.load()) * scale_ / 1e6; }

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};  // last = +Inf
  std::atomic<uint64_t> sum_units_{0};
  double scale_;
};

}  // namespace kvgate::metrics
