// The candidate filters in the order every chain runs them: a drop is counted under the first
// filter that drops the endpoint.
#include <array>

#include "routing/eligibility/filters.h"

namespace kvgate::routing {

std::span<const CandidateFilter> candidateFilters() {
  static const std::array<CandidateFilter, 4> all{eligibility::kHealthy, eligibility::kBreaker,
                                                  eligibility::kController, eligibility::kPdRole};
  static_assert(all.size() <= kMaxCandidateFilters);
  return all;
}

}  // namespace kvgate::routing
