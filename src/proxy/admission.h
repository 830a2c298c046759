// The admission gate of P/D rules (seed 000, "The admission gate"; upstream-gateway.md §2.5):
// default off. Its settings (config/admission.h: each the rule's field, else the LLB_FC_*
// environment variable read at start, else the default): fc_mode, fc_max_outstanding (the global
// valve: beyond it 503 admission_no_capacity), per-endpoint caps on prefill and decode endpoints,
// fc_max_queue_depth (parked requests per prefill endpoint; 0: shed at once) and
// fc_max_queue_wait_ms.
// 0 means unlimited. Endpoints at their cap are masked from the ladder; when every usable prefill
// endpoint is capped, the request parks on the shortest FIFO (endpoints/admission_queue.h) and
// takes the first slot that frees there, or is shed with a retriable 429 admission_capacity when
// the queue is full (or disabled); a parked request that waited the whole window gets 504
// admission_queue_timeout, one dropped by a rule delete or a drain 503 admission_drained. Every
// admission answer carries Retry-After (429, 503) and X-Loxilb-Admission-Inflight / -Queued /
// -Limit.
#pragma once
#include <cstdint>

#include "config/admission.h"

namespace kvgate::proxy {

using config::AdmissionConfig;

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
