// The admission gate of P/D rules (seed 000, "The admission gate"; upstream-gateway.md §2.5):
// default off. Each knob is the rule's field, else the LLB_FC_* environment variable, else the
// default:
//   fc_mode (LLB_FC_MODE)                  off | observe (count what enforce would do, admit
//                                          everything) | enforce | inherit (the environment's)
//   fc_max_outstanding (LLB_FC_MAX_OUTSTANDING)   the global valve: requests of the rule in
//                                          flight at once; beyond it 503 admission_no_capacity
//   fc_prefill_max_inflight, else fc_ep_max_inflight (LLB_FC_PREFILL_MAX_INFLIGHT,
//                                          LLB_FC_EP_MAX_INFLIGHT)   per prefill endpoint
//   fc_decode_max_inflight (LLB_FC_DECODE_MAX_INFLIGHT), else fc_ep_max_inflight   per decode
//   fc_max_queue_depth (LLB_FC_MAX_QUEUE_DEPTH, <= 65536)   requests parked per prefill endpoint;
//                                          0: shed at once
//   fc_max_queue_wait_ms (LLB_FC_MAX_QUEUE_WAIT_MS; 5000 when a depth is set)
// 0 means unlimited. Endpoints at their cap are masked from the ladder; when every usable prefill
// endpoint is capped, the request parks on the shortest FIFO (endpoints/admission_queue.h) and
// takes the first slot that frees there, or is shed with a retriable 429 admission_capacity when
// the queue is full (or disabled); a parked request that waited the whole window gets 504
// admission_queue_timeout, one dropped by a rule delete or a drain 503 admission_drained. Every
// admission answer carries Retry-After (429, 503) and X-Loxilb-Admission-Inflight / -Queued /
// -Limit.
#pragma once
#include <cstdint>

#include "config/rule.h"

namespace kvgate::proxy {

struct AdmissionConfig {
  enum class Mode : uint8_t { kOff, kObserve, kEnforce };
  Mode mode = Mode::kOff;
  int64_t max_outstanding = 0;
  int64_t prefill_max = 0;
  int64_t decode_max = 0;
  int64_t queue_depth = 0;
  int64_t queue_wait_ms = 0;
  bool on() const { return mode != Mode::kOff; }
  bool enforce() const { return mode == Mode::kEnforce; }
};

AdmissionConfig admissionConfig(const config::RuleSpec& rule);

// loxilb_ai_admission_decisions_total's `decision` label.
enum class AdmissionDecision : uint8_t {
  kAdmit,      // under every cap
  kPark,       // parked, then admitted
  kShed,       // 429 admission_capacity
  kValve,      // 503 admission_no_capacity
  kTimeout,    // 504 admission_queue_timeout
  kDrained,    // 503 admission_drained
  kWouldPark,  // observe mode: enforce would have parked (admitted)
  kWouldShed,  // observe mode: enforce would have shed or closed the valve (admitted)
  kCount
};
inline constexpr const char* kAdmissionDecisionNames[] = {
    "admit", "park", "shed", "valve", "timeout", "drained", "would_park", "would_shed"};

}  // namespace kvgate::proxy
