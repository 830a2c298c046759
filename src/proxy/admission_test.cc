// The admission gate's knobs: the rule's field, else LLB_FC_*, else the default.
#include "proxy/admission.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace kvgate::proxy {
namespace {

TEST(AdmissionConfig, RuleFieldThenEnvironmentThenDefault) {
  for (const char* v : {"LLB_FC_MODE", "LLB_FC_EP_MAX_INFLIGHT", "LLB_FC_PREFILL_MAX_INFLIGHT",
                        "LLB_FC_MAX_QUEUE_DEPTH", "LLB_FC_MAX_QUEUE_WAIT_MS"})
    ::unsetenv(v);
  config::RuleSpec r;
  r.service_args = nlohmann::json::object();
  auto c = admissionConfig(r);
  EXPECT_FALSE(c.on());  // default off
  EXPECT_EQ(c.prefill_max, 0);
  r.service_args = {{"fc_mode", "enforce"}, {"fc_ep_max_inflight", 4}, {"fc_max_queue_depth", 8}};
  c = admissionConfig(r);
  EXPECT_TRUE(c.enforce());
  EXPECT_EQ(c.prefill_max, 4);  // fc_prefill_max_inflight unset: the per-endpoint cap
  EXPECT_EQ(c.decode_max, 4);
  EXPECT_EQ(c.queue_depth, 8);
  EXPECT_EQ(c.queue_wait_ms, 5000);  // a depth without a window: 5 s
  ::setenv("LLB_FC_PREFILL_MAX_INFLIGHT", "2", 1);
  ::setenv("LLB_FC_MAX_QUEUE_WAIT_MS", "700", 1);
  c = admissionConfig(r);
  EXPECT_EQ(c.prefill_max, 2);  // the environment beats the default (fc_ep_max_inflight)
  EXPECT_EQ(c.queue_wait_ms, 700);
  r.service_args["fc_prefill_max_inflight"] = 3;
  EXPECT_EQ(admissionConfig(r).prefill_max, 3);  // the rule beats the environment
  // inherit (and an unset mode) take LLB_FC_MODE; garbage there means off.
  r.service_args["fc_mode"] = "inherit";
  ::setenv("LLB_FC_MODE", "observe", 1);
  EXPECT_EQ(admissionConfig(r).mode, AdmissionConfig::Mode::kObserve);
  ::setenv("LLB_FC_MODE", "loud", 1);
  EXPECT_FALSE(admissionConfig(r).on());
  ::setenv("LLB_FC_PREFILL_MAX_INFLIGHT", "-5", 1);  // out of range: ignored
  r.service_args.erase("fc_prefill_max_inflight");
  EXPECT_EQ(admissionConfig(r).prefill_max, 4);
  for (const char* v : {"LLB_FC_MODE", "LLB_FC_PREFILL_MAX_INFLIGHT", "LLB_FC_MAX_QUEUE_WAIT_MS"})
    ::unsetenv(v);
}

}  // namespace
}  // namespace kvgate::proxy
