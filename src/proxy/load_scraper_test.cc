// Which rules' endpoints the data plane scrapes for the engines' /metrics: those whose pipeline
// has a stage that reads them (kv_exact's laws and profiles, the smg selector), as each stage's
// registry entry declares, and no others.
#include "proxy/load_scraper.h"

#include <gtest/gtest.h>

#include "common/clock.h"

namespace kvgate::proxy {
namespace {

common::ManualClock g_clock;

config::RuleSpec ruleOn(uint16_t engine_port, nlohmann::json args) {
  config::RuleSpec r;
  r.service_args = std::move(args);
  config::EndpointSpec e;
  e.ip = "127.0.0.9";
  e.port = engine_port;
  e.json = {{"kvCapacityBlocks", 7}};
  r.endpoints.push_back(e);
  return r;
}

TEST(LoadScraper, ScrapesTheRulesWhoseStagesReadEngineMetrics) {
  std::vector<std::shared_ptr<endpoints::EndpointState>> eps;
  for (uint16_t p = 1; p <= 7; ++p)
    eps.push_back(std::make_shared<endpoints::EndpointState>(p, "127.0.0.9", p, g_clock));
  const std::vector<config::RuleSpec> rules = {
      ruleOn(1, {{"sel", 0}}),                                    // round-robin: no
      ruleOn(2, {{"kvExactMode", 3}}),                            // Tier 1.5: yes
      ruleOn(3, {{"selector", "smg"}}),                           // SMG's cache_aware: yes
      ruleOn(4, {{"selector", "sglang"}}),                        // the older one: no
      ruleOn(5, {{"pd_disagg_mode", true}, {"kvExactMode", 1}}),  // P/D with Tier 1.5: yes
      ruleOn(6, {{"pd_disagg_mode", true}}),                      // P/D ladder alone: no
      // (a P/D rule naming smg: its ladder never runs that stage, so nothing reads the metrics)
      ruleOn(7, {{"pd_disagg_mode", true}, {"selector", "smg"}}),
  };
  const auto specs = scrapeSpecs(rules, eps, nullptr);
  std::vector<uint16_t> ports;
  for (const auto& s : specs) ports.push_back(s.ep->port);
  EXPECT_EQ(ports, (std::vector<uint16_t>{2, 3, 5}));
  // A scraped endpoint takes the rule's kvCapacityBlocks override; another keeps none.
  EXPECT_EQ(eps[1]->kv_capacity_override.load(), 7);
  EXPECT_EQ(eps[0]->kv_capacity_override.load(), 0);
}

}  // namespace
}  // namespace kvgate::proxy
