// PrefillRate: an endpoint's prefill throughput, estimated online from the gateway's own streams
// (issue 29 §2: no offline calibration).
//
// Algorithm: when a streamed request that Tier 1.5 keyed gets its first response byte, the engine
// has prefilled, since the request was sent, at least the request's own uncached tokens and the
// uncached tokens of the streams this gateway had sent there before it that had not started yet
// (the queued prefill ahead of it). One sample = (ahead + own) tokens / time to that first byte;
// samples of less than kMinSampleTokens are skipped (fixed costs dominate them). The estimate is
// an exponentially weighted mean of the samples, weight kAlpha for the newest (about the last ten
// samples count). It underestimates a quiet engine (a lone request's time includes network and
// scheduling) and reads closest to the engine's throughput when its queue is long, which is when
// it is used: the queueing delay of a new request (queued tokens / rate) and llm-d's saturation
// bound tau = rate x max TTFT penalty (the prefix_affinity filter's tauSeconds).
// Lock-free: many workers update one endpoint (a CAS loop on the mean's bits).
#pragma once
#include <atomic>
#include <bit>
#include <cstdint>

namespace kvgate::endpoints {

class PrefillRate {
 public:
  static constexpr double kAlpha = 0.1;
  static constexpr double kMinSampleTokens = 64;

  // A first byte after `seconds`, with `tokens` of prefill done there meanwhile.
  void observe(double tokens, double seconds) {
    if (!(tokens >= kMinSampleTokens) || !(seconds > 0)) return;
    const double sample = tokens / seconds;
    uint64_t old = bits_.load(std::memory_order_relaxed);
    for (;;) {
      const double cur = std::bit_cast<double>(old);
      const double next = cur > 0 ? cur + kAlpha * (sample - cur) : sample;
      if (bits_.compare_exchange_weak(old, std::bit_cast<uint64_t>(next),
                                      std::memory_order_relaxed))
        break;
    }
    samples_.fetch_add(1, std::memory_order_relaxed);
  }
  // Tokens per second; 0 until the first sample.
  double tokensPerSecond() const { return std::bit_cast<double>(bits_.load(std::memory_order_relaxed)); }
  uint64_t samples() const { return samples_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> bits_{0};  // the mean's bits (0.0 = none yet)
  std::atomic<uint64_t> samples_{0};
};

}  // namespace kvgate::endpoints
