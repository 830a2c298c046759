#include "routing/eligibility/eligibility.h"

namespace kvgate::routing {

Eligibility::Eligibility(const config::RuleSpec& rule) {
  const auto all = candidateFilters();
  for (size_t i = 0; i < all.size() && count_ < kMaxCandidateFilters; ++i)
    if (all[i].applies(rule)) chain_[count_++] = static_cast<uint8_t>(i);
}

void Eligibility::apply(std::span<const PoolEndpoint> endpoints, const EligibilityContext& ctx,
                        std::vector<bool>& excluded, EligibilityStats* stats) const {
  const auto all = candidateFilters();
  excluded.assign(endpoints.size(), false);
  for (size_t i = 0; i < endpoints.size(); ++i)
    for (size_t k = 0; k < count_; ++k) {
      const size_t f = chain_[k];
      if (!all[f].drops(endpoints[i], ctx)) continue;
      excluded[i] = true;
      if (stats && all[f].counted) stats->dropped[f].fetch_add(1, std::memory_order_relaxed);
      break;
    }
}

void Eligibility::applyLater(const CandidateFilter& f, std::span<const PoolEndpoint> endpoints,
                             const EligibilityContext& ctx, std::vector<bool>& excluded,
                             EligibilityStats* stats) {
  const auto all = candidateFilters();
  size_t at = 0;
  while (at < all.size() && all[at].name != f.name) ++at;
  for (size_t i = 0; i < endpoints.size() && i < excluded.size(); ++i) {
    if (excluded[i] || !f.drops(endpoints[i], ctx)) continue;
    excluded[i] = true;
    if (stats && f.counted && at < all.size())
      stats->dropped[at].fetch_add(1, std::memory_order_relaxed);
  }
}

std::vector<std::string> Eligibility::names() const {
  std::vector<std::string> out;
  const auto all = candidateFilters();
  for (size_t k = 0; k < count_; ++k) out.emplace_back(all[chain_[k]].name);
  return out;
}

}  // namespace kvgate::routing
