// The admission gate's settings: the rule's field, else the LLB_FC_* environment as read at
// start, else the default.
#include "config/admission.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace kvgate::config {
namespace {

AdmissionEnv envOf(const std::map<std::string, std::string>& vars,
                   std::vector<std::string>* warnings = nullptr) {
  std::vector<std::string> w;
  AdmissionEnv e = readAdmissionEnv(
      [&](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      w);
  if (warnings) *warnings = w;
  return e;
}

TEST(AdmissionConfig, RuleFieldThenEnvironmentThenDefault) {
  RuleSpec r;
  r.service_args = nlohmann::json::object();
  auto c = admissionConfig(r, envOf({}));
  EXPECT_FALSE(c.on());  // default off
  EXPECT_EQ(c.prefill_max, 0);
  EXPECT_EQ(c.queue_wait_ms, 0);
  r.service_args = {{"fc_mode", "enforce"}, {"fc_ep_max_inflight", 4}, {"fc_max_queue_depth", 8}};
  c = admissionConfig(r, envOf({}));
  EXPECT_TRUE(c.enforce());
  EXPECT_EQ(c.prefill_max, 4);  // fc_prefill_max_inflight unset: the per-endpoint cap
  EXPECT_EQ(c.decode_max, 4);
  EXPECT_EQ(c.queue_depth, 8);
  EXPECT_EQ(c.queue_wait_ms, 5000);  // a depth without a window: 5 s
  const AdmissionEnv env =
      envOf({{"LLB_FC_PREFILL_MAX_INFLIGHT", "2"}, {"LLB_FC_MAX_QUEUE_WAIT_MS", "700"}});
  c = admissionConfig(r, env);
  EXPECT_EQ(c.prefill_max, 2);  // the environment beats the default (fc_ep_max_inflight)
  EXPECT_EQ(c.decode_max, 4);
  EXPECT_EQ(c.queue_wait_ms, 700);
  r.service_args["fc_prefill_max_inflight"] = 3;
  EXPECT_EQ(admissionConfig(r, env).prefill_max, 3);  // the rule beats the environment
  r.service_args["fc_prefill_max_inflight"] = 0;      // 0 in the rule: not set
  EXPECT_EQ(admissionConfig(r, env).prefill_max, 2);
}

TEST(AdmissionConfig, ModeInheritsTheEnvironmentAndGarbageMeansOff) {
  RuleSpec r;
  r.service_args = {{"fc_mode", "inherit"}};
  EXPECT_EQ(admissionConfig(r, envOf({{"LLB_FC_MODE", "observe"}})).mode,
            AdmissionConfig::Mode::kObserve);
  r.service_args = nlohmann::json::object();  // unset: the environment's too
  EXPECT_EQ(admissionConfig(r, envOf({{"LLB_FC_MODE", "enforce"}})).mode,
            AdmissionConfig::Mode::kEnforce);
  r.service_args = {{"fc_mode", "off"}};  // the rule's own off beats the environment
  EXPECT_FALSE(admissionConfig(r, envOf({{"LLB_FC_MODE", "enforce"}})).on());
  r.service_args = {{"fc_mode", "inherit"}};
  std::vector<std::string> w;
  EXPECT_FALSE(admissionConfig(r, envOf({{"LLB_FC_MODE", "loud"}}, &w)).on());
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("LLB_FC_MODE='loud'"), std::string::npos) << w[0];
  EXPECT_STREQ(admissionModeName(AdmissionConfig::Mode::kEnforce), "enforce");
  EXPECT_STREQ(admissionModeName(AdmissionConfig::Mode::kOff), "off");
}

TEST(AdmissionConfig, OutOfRangeEnvironmentValuesAreIgnoredWithAWarning) {
  std::vector<std::string> w;
  const AdmissionEnv e = envOf({{"LLB_FC_PREFILL_MAX_INFLIGHT", "-5"},
                                {"LLB_FC_MAX_QUEUE_DEPTH", "65537"},
                                {"LLB_FC_MAX_OUTSTANDING", "12x"},
                                {"LLB_FC_DECODE_MAX_INFLIGHT", "9"}},
                               &w);
  EXPECT_FALSE(e.prefill_max);
  EXPECT_FALSE(e.queue_depth);
  EXPECT_FALSE(e.max_outstanding);
  EXPECT_EQ(e.decode_max, 9);
  EXPECT_EQ(w.size(), 3u);
  RuleSpec r;
  r.service_args = {{"fc_ep_max_inflight", 4}};
  const auto c = admissionConfig(r, e);
  EXPECT_EQ(c.prefill_max, 4);  // the ignored value leaves the default
  EXPECT_EQ(c.decode_max, 9);
  EXPECT_EQ(c.queue_depth, 0);
}

}  // namespace
}  // namespace kvgate::config
