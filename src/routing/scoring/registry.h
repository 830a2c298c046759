// The name-keyed registry of scoring-profile parts: every scorer and filter has one name, the
// one config/scoring_profile.cc validates rules against (a test checks the two lists agree).
#pragma once
#include <memory>
#include <string_view>

#include "config/scoring_profile.h"
#include "routing/scoring/scorer.h"

namespace kvgate::routing::scoring {

using ScorerFactory = std::unique_ptr<Scorer> (*)(const config::ScoringPart&);
using FilterFactory = std::unique_ptr<Filter> (*)(const config::ScoringPart&);

// Null when this build has no such part.
ScorerFactory findScorer(std::string_view name);
FilterFactory findFilter(std::string_view name);

}  // namespace kvgate::routing::scoring
