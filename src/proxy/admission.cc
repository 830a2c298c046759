#include "proxy/admission.h"

#include <cstdlib>
#include <string>

#include "common/env.h"
#include "common/log.h"

namespace kvgate::proxy {
namespace {

// The rule's field, else the environment's LLB_FC_<NAME>, else `dflt`.
int64_t knob(const nlohmann::json& sa, const char* field, const char* env, int64_t hi,
             int64_t dflt) {
  if (sa.is_object())
    if (auto it = sa.find(field);
        it != sa.end() && it->is_number_integer() && it->get<int64_t>() != 0)
      return it->get<int64_t>();
  return common::envInt(env, 0, hi, dflt);
}

}  // namespace

AdmissionConfig admissionConfig(const config::RuleSpec& rule) {
  const auto& sa = rule.service_args;
  AdmissionConfig c;
  std::string mode = sa.is_object() ? sa.value("fc_mode", std::string()) : std::string();
  if (mode.empty() || mode == "inherit") {
    const char* e = std::getenv("LLB_FC_MODE");
    mode = e && *e ? e : "off";
    if (mode != "off" && mode != "observe" && mode != "enforce") {
      log::warn("config", "ignoring LLB_FC_MODE='" + mode + "' (off, observe, enforce): off");
      mode = "off";
    }
  }
  c.mode = mode == "enforce"   ? AdmissionConfig::Mode::kEnforce
           : mode == "observe" ? AdmissionConfig::Mode::kObserve
                               : AdmissionConfig::Mode::kOff;
  constexpr int64_t kBig = 1'000'000'000;
  c.max_outstanding = knob(sa, "fc_max_outstanding", "LLB_FC_MAX_OUTSTANDING", kBig, 0);
  const int64_t ep = knob(sa, "fc_ep_max_inflight", "LLB_FC_EP_MAX_INFLIGHT", kBig, 0);
  c.prefill_max = knob(sa, "fc_prefill_max_inflight", "LLB_FC_PREFILL_MAX_INFLIGHT", kBig, ep);
  c.decode_max = knob(sa, "fc_decode_max_inflight", "LLB_FC_DECODE_MAX_INFLIGHT", kBig, ep);
  c.queue_depth = knob(sa, "fc_max_queue_depth", "LLB_FC_MAX_QUEUE_DEPTH", 65536, 0);
  c.queue_wait_ms = knob(sa, "fc_max_queue_wait_ms", "LLB_FC_MAX_QUEUE_WAIT_MS", 3'600'000,
                         c.queue_depth > 0 ? 5000 : 0);
  return c;
}

}  // namespace kvgate::proxy
