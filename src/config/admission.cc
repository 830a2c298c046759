#include "config/admission.h"

#include "common/env.h"

namespace kvgate::config {
namespace {

constexpr int64_t kBig = 1'000'000'000;
constexpr int64_t kMaxQueueDepth = 65'536;
constexpr int64_t kMaxQueueWaitMs = 3'600'000;

// The rule's nonzero integer field, else the environment's value, else `dflt`.
int64_t knob(const nlohmann::json& sa, const char* field, const std::optional<int64_t>& env,
             int64_t dflt) {
  if (sa.is_object())
    if (auto it = sa.find(field);
        it != sa.end() && it->is_number_integer() && it->get<int64_t>() != 0)
      return it->get<int64_t>();
  return env ? *env : dflt;
}

}  // namespace

const char* admissionModeName(AdmissionConfig::Mode m) {
  switch (m) {
    case AdmissionConfig::Mode::kObserve:
      return "observe";
    case AdmissionConfig::Mode::kEnforce:
      return "enforce";
    case AdmissionConfig::Mode::kOff:
      break;
  }
  return "off";
}

AdmissionEnv readAdmissionEnv(const std::function<const char*(const char*)>& env,
                              std::vector<std::string>& warnings) {
  auto integer = [&](const char* name, int64_t hi) -> std::optional<int64_t> {
    std::string why;
    const auto x = common::parseEnvInt(name, env(name), 0, hi, why);
    if (!why.empty()) warnings.push_back(why + "; the rule's field, else the default");
    return x;
  };
  AdmissionEnv e;
  if (const char* v = env("LLB_FC_MODE"); v && *v) {
    const std::string s(v);
    if (s == "observe")
      e.mode = AdmissionConfig::Mode::kObserve;
    else if (s == "enforce")
      e.mode = AdmissionConfig::Mode::kEnforce;
    else if (s != "off")
      warnings.push_back("ignoring LLB_FC_MODE='" + s + "' (off, observe, enforce): off");
  }
  e.max_outstanding = integer("LLB_FC_MAX_OUTSTANDING", kBig);
  e.ep_max = integer("LLB_FC_EP_MAX_INFLIGHT", kBig);
  e.prefill_max = integer("LLB_FC_PREFILL_MAX_INFLIGHT", kBig);
  e.decode_max = integer("LLB_FC_DECODE_MAX_INFLIGHT", kBig);
  e.queue_depth = integer("LLB_FC_MAX_QUEUE_DEPTH", kMaxQueueDepth);
  e.queue_wait_ms = integer("LLB_FC_MAX_QUEUE_WAIT_MS", kMaxQueueWaitMs);
  return e;
}

AdmissionConfig admissionConfig(const RuleSpec& rule, const AdmissionEnv& env) {
  const auto& sa = rule.service_args;
  AdmissionConfig c;
  const std::string mode = sa.is_object() ? sa.value("fc_mode", std::string()) : std::string();
  c.mode = mode == "enforce"                   ? AdmissionConfig::Mode::kEnforce
           : mode == "observe"                 ? AdmissionConfig::Mode::kObserve
           : mode.empty() || mode == "inherit" ? env.mode
                                               : AdmissionConfig::Mode::kOff;
  c.max_outstanding = knob(sa, "fc_max_outstanding", env.max_outstanding, 0);
  const int64_t ep = knob(sa, "fc_ep_max_inflight", env.ep_max, 0);
  c.prefill_max = knob(sa, "fc_prefill_max_inflight", env.prefill_max, ep);
  c.decode_max = knob(sa, "fc_decode_max_inflight", env.decode_max, ep);
  c.queue_depth = knob(sa, "fc_max_queue_depth", env.queue_depth, 0);
  c.queue_wait_ms =
      knob(sa, "fc_max_queue_wait_ms", env.queue_wait_ms, c.queue_depth > 0 ? 5000 : 0);
  return c;
}

}  // namespace kvgate::config
