// PdExchange: where the simulated prefill and decode workers of one `kvgate sim` process meet
// (the stand-in for NIXL / Mooncake transfers and SGLang's bootstrap server).
//
// A prefill worker that finished a request's prefill holds its KV blocks here under a key
// (vLLM: remote_engine_id/remote_request_id; SGLang: the bootstrap room; TensorRT-LLM: the
// context request id) until a decode worker pulls them or the hold expires (vLLM's
// VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s by default, divided by the speed-up). Pulling checks
// that the decode request's prompt is the one prefilled. Everything runs on the sim's one
// thread: no locks.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kvgate::sim {

class PdExchange {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hold {
    size_t worker = 0;              // the prefill worker's index
    std::vector<uint32_t> prompt;   // the prefilled prompt's token ids
    std::string host;               // the prefill worker's address (SGLang's bootstrap_host)
    uint16_t bootstrap_port = 0;    // and its bootstrap port
    std::string token;              // an opaque check value (TensorRT-LLM's state)
    std::function<void()> release;  // gives the blocks back to the prefill worker's cache
    Clock::time_point expires;
  };
  enum class Pull : uint8_t { kOk, kMissing, kWrongPrompt };

  ~PdExchange() {
    for (auto& [k, h] : holds_) h.release = nullptr;  // workers may be gone: release nothing
  }
  // Holds `h` under `key` (a key held already is replaced, its blocks released).
  void hold(const std::string& key, Hold h) {
    sweep();
    auto it = holds_.find(key);
    if (it != holds_.end()) drop(it);
    holds_.emplace(key, std::move(h));
  }
  // (No sweep: an SGLang decode polls this every millisecond.)
  bool has(const std::string& key) const { return holds_.count(key) != 0; }
  // Takes the hold of `key` for a decode of `prompt`; `out` gets it on kOk (its blocks already
  // released: the transfer is done once they are copied).
  Pull pull(const std::string& key, const std::vector<uint32_t>& prompt, Hold* out = nullptr) {
    sweep();
    auto it = holds_.find(key);
    if (it == holds_.end()) return Pull::kMissing;
    if (it->second.prompt != prompt) return Pull::kWrongPrompt;
    if (out) {
      *out = it->second;
      out->release = nullptr;  // released below, once
    }
    drop(it);
    ++pulled_;
    return Pull::kOk;
  }
  // Drops expired holds (their blocks go back to the prefill worker).
  void sweep() {
    const auto now = Clock::now();
    for (auto it = holds_.begin(); it != holds_.end();) {
      if (it->second.expires <= now) {
        ++expired_;
        it = drop(it);
      } else {
        ++it;
      }
    }
  }
  size_t heldBy(size_t worker) const {
    size_t n = 0;
    for (const auto& [k, h] : holds_) n += h.worker == worker ? 1 : 0;
    return n;
  }
  uint64_t pulled() const { return pulled_; }
  uint64_t expired() const { return expired_; }
  uint64_t nextContextId() { return ++context_ids_; }

 private:
  std::map<std::string, Hold>::iterator drop(std::map<std::string, Hold>::iterator it) {
    if (it->second.release) it->second.release();
    return holds_.erase(it);
  }
  std::map<std::string, Hold> holds_;
  uint64_t pulled_ = 0, expired_ = 0, context_ids_ = 0;
};

}  // namespace kvgate::sim
