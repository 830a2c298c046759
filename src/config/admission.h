// The admission gate's settings (seed 000, "The admission gate"; upstream-gateway.md §2.5), typed
// once when a P/D rule is committed (issue 29 §1 "typed config"): each knob is the rule's field,
// else the LLB_FC_* environment variable (read once when `kvgate serve` starts: AdmissionEnv,
// part of routing::RoutingEnv), else the default:
//   fc_mode (LLB_FC_MODE)                  off | observe (count what enforce would do, admit
//                                          everything) | enforce | inherit (the environment's);
//                                          default off
//   fc_max_outstanding (LLB_FC_MAX_OUTSTANDING)   the global valve: requests of the rule in
//                                          flight at once
//   fc_prefill_max_inflight, else fc_ep_max_inflight (LLB_FC_PREFILL_MAX_INFLIGHT,
//                                          LLB_FC_EP_MAX_INFLIGHT)   per prefill endpoint
//   fc_decode_max_inflight (LLB_FC_DECODE_MAX_INFLIGHT), else fc_ep_max_inflight   per decode
//   fc_max_queue_depth (LLB_FC_MAX_QUEUE_DEPTH, <= 65536)   requests parked per prefill endpoint
//   fc_max_queue_wait_ms (LLB_FC_MAX_QUEUE_WAIT_MS, <= 3,600,000; 5000 when a depth is set)
// 0 means unlimited; a rule field of 0 means "not set" (the environment's, else the default). The
// gate itself is src/proxy/admission.h; each rule's GET shows the values it runs with ("effective":
// fc_mode, fc_max_outstanding, ...).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/rule.h"

namespace kvgate::config {

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
const char* admissionModeName(AdmissionConfig::Mode m);

// The LLB_FC_* variables as `kvgate serve` read them at start; unset (or ignored) ones empty.
struct AdmissionEnv {
  AdmissionConfig::Mode mode = AdmissionConfig::Mode::kOff;  // LLB_FC_MODE (unset: off)
  std::optional<int64_t> max_outstanding, ep_max, prefill_max, decode_max, queue_depth,
      queue_wait_ms;
};

// Reads the LLB_FC_* variables through `env`; each ignored value (out of range, not a number, an
// unknown mode) adds a line to `warnings` and means unset.
AdmissionEnv readAdmissionEnv(const std::function<const char*(const char*)>& env,
                              std::vector<std::string>& warnings);

// The rule's admission settings over the environment's.
AdmissionConfig admissionConfig(const RuleSpec& rule, const AdmissionEnv& env);

}  // namespace kvgate::config
