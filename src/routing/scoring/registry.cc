#include "routing/scoring/registry.h"

#include <utility>

namespace kvgate::routing::scoring {

// Each part's factory, defined in its own file (scorers/, filters/).
std::unique_ptr<Scorer> makePrefixScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makePrefixMinMaxScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makeQueueScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makeKvUtilizationScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makeLoadScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makeTokenLoadScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makePredictScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makePredictQScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makeSoftCostScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makeTtftCostScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makeDynamoCostScorer(const config::ScoringPart&);
std::unique_ptr<Scorer> makeDynamoV1CostScorer(const config::ScoringPart&);
std::unique_ptr<Filter> makePrefixAffinityFilter(const config::ScoringPart&);
std::unique_ptr<Filter> makeKvUsageBelowFilter(const config::ScoringPart&);
std::unique_ptr<Filter> makeBoundedLoadFilter(const config::ScoringPart&);

namespace {
constexpr std::pair<std::string_view, ScorerFactory> kScorers[] = {
    {"prefix", makePrefixScorer},
    {"prefix_minmax", makePrefixMinMaxScorer},
    {"queue", makeQueueScorer},
    {"kv_utilization", makeKvUtilizationScorer},
    {"load", makeLoadScorer},
    {"token_load", makeTokenLoadScorer},
    {"predict", makePredictScorer},
    {"predict_q", makePredictQScorer},
    {"soft_cost", makeSoftCostScorer},
    {"ttft_cost", makeTtftCostScorer},
    {"dynamo_cost", makeDynamoCostScorer},
    {"dynamo_v1_cost", makeDynamoV1CostScorer},
};
constexpr std::pair<std::string_view, FilterFactory> kFilters[] = {
    {"prefix_affinity", makePrefixAffinityFilter},
    {"kv_usage_below", makeKvUsageBelowFilter},
    {"bounded_load", makeBoundedLoadFilter},
};
}  // namespace

ScorerFactory findScorer(std::string_view name) {
  for (const auto& [n, f] : kScorers)
    if (n == name) return f;
  return nullptr;
}

FilterFactory findFilter(std::string_view name) {
  for (const auto& [n, f] : kFilters)
    if (n == name) return f;
  return nullptr;
}

}  // namespace kvgate::routing::scoring
