// The candidate filters (routing/eligibility/eligibility.h), one definition per file; registry.cc
// orders them.
#pragma once
#include "routing/eligibility/eligibility.h"

namespace kvgate::routing::eligibility {

extern const CandidateFilter kHealthy;
extern const CandidateFilter kBreaker;
extern const CandidateFilter kController;
extern const CandidateFilter kPdRole;

}  // namespace kvgate::routing::eligibility
