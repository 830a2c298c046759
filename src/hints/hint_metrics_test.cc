// The hint service's exposition: upstream names and labels, bounded model cardinality.
#include "hints/hint_metrics.h"

#include <gtest/gtest.h>

namespace kvgate::hints {
namespace {

TEST(HintMetrics, UpstreamNamesAndBoundedModels) {
  common::ManualClock clock;
  HintIndex index(clock, CachePolicy{});
  HintMetrics m;
  std::string empty = m.render(index);
  EXPECT_NE(empty.find("# TYPE inferencecache_lookup_route_calls_total counter"), std::string::npos);
  m.lookup("m", Reason::kPrefixMatch, true, 0.0002);
  m.lookup("m", Reason::kNoHint, false, 0.0002);
  for (int i = 0; i < 300; ++i) m.lookup("model-" + std::to_string(i), Reason::kNoHint, false, 0);
  std::string t = m.render(index);
  EXPECT_NE(t.find("inferencecache_lookup_route_calls_total{model=\"m\",reason_code=\"PREFIX_MATCH\","
                   "hint_used=\"true\"} 1"),
            std::string::npos)
      << t.substr(0, 600);
  EXPECT_NE(t.find("model=\"other\""), std::string::npos);
  EXPECT_EQ(t.find("model=\"model-299\""), std::string::npos);
  EXPECT_NE(t.find("inferencecache_index_evictions_total{algorithm=\"lru\",reason=\"ttl\"} 0"),
            std::string::npos);
}

}  // namespace
}  // namespace kvgate::hints
