// The candidate filters in the order every chain runs them: a drop is counted under the first
// filter that drops the endpoint. pd_role first: an endpoint of the other leg's role is never a
// candidate of this leg, so its health is not this leg's drop.
#include <array>

#include "routing/eligibility/filters.h"

namespace kvgate::routing {

std::span<const CandidateFilter> candidateFilters() {
  static const std::array<CandidateFilter, 4> all{eligibility::kPdRole, eligibility::kHealthy,
                                                  eligibility::kBreaker, eligibility::kController};
  static_assert(all.size() <= kMaxCandidateFilters);
  return all;
}

}  // namespace kvgate::routing
