// Eligibility: which of a rule's endpoints a request may be routed to at all, decided by named
// candidate filters before the first routing stage runs. The filters are the first part of every
// routing profile (the stages or the scoring profile choose among what they leave); each drops an
// endpoint for one reason, and each drop is counted per rule and filter
// (kvgate_routing_filtered_total{rule,filter}), so an operator sees why a pool narrowed.
//
// The filters (one file each, in registry.cc's order):
// - pd_role: on a P/D rule (pd_disagg_mode), an endpoint of another ep_role than the leg being
//   routed (prefill 1, decode 2, the role-less rescue 0). First, and not counted: the other
//   role's endpoints are never this leg's candidates.
// - healthy: the endpoint's active probe is down, or passive detection holds it down.
// - breaker: its circuit breaker is OPEN (rules with cb_enable only). A HALF_OPEN endpoint stays:
//   its single trial is taken when a stage picks it (endpoints/health.h).
// - controller: the external controller's last word (endpoints/controller.h) is DISABLED, or
//   DRAINING for a request that starts something new there (EligibilityContext::draining).
//
// A rule's chain (which filters apply to it) is fixed when the rule is committed and shown in its
// GET `effective` block as `candidateFilters` (routing/rule_profile.h). Adding a filter: one file
// with its function and CandidateFilter entry, one line in registry.cc, its test in
// eligibility_test.cc (docs/ARCHITECTURE.md, "Adding a candidate filter").
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/rule.h"
#include "routing/stage.h"

namespace kvgate::routing {

// What a filter reads of the request being routed.
struct EligibilityContext {
  int64_t now_ns = 0;     // the controller's staleness is judged at this time
  int role = -1;          // the leg's ep_role (P/D rules), -1: any
  bool draining = true;   // drop the controller's DRAINING endpoints too (false: a request
                          // pinned to one there, such as a stored response's, may still go)
};

struct CandidateFilter {
  std::string_view name;  // metric label `filter`, the effective block's name
  // Whether its drops are counted (pd_role's are not: every P/D request drops the other role's
  // endpoints from each leg, which says nothing an operator acts on).
  bool counted;
  // Whether the filter is in `rule`'s chain.
  bool (*applies)(const config::RuleSpec& rule);
  // True when endpoint `e` must not be picked for this request.
  bool (*drops)(const PoolEndpoint& e, const EligibilityContext& ctx);
};

// Every filter, in the order a chain runs them (registry.cc).
std::span<const CandidateFilter> candidateFilters();
constexpr size_t kMaxCandidateFilters = 8;

// Drops per filter (index: candidateFilters()'s order); kept with the rule's counters across
// snapshots.
struct EligibilityStats {
  std::array<std::atomic<uint64_t>, kMaxCandidateFilters> dropped{};
};

// One rule's chain of candidate filters.
class Eligibility {
 public:
  Eligibility() = default;
  explicit Eligibility(const config::RuleSpec& rule);

  // excluded[i] = some filter drops endpoint i (resized to the endpoints); each drop is counted
  // in `stats` (null: not counted) under the first filter that drops it.
  void apply(std::span<const PoolEndpoint> endpoints, const EligibilityContext& ctx,
             std::vector<bool>& excluded, EligibilityStats* stats) const;

  // Filter `f` once more, later in the request, over the endpoints `excluded` still leaves (a P/D
  // decode pick: the controller's DRAINING endpoints, which the decode mask kept for a pinned
  // conversation); its drops are counted as apply() counts them.
  static void applyLater(const CandidateFilter& f, std::span<const PoolEndpoint> endpoints,
                         const EligibilityContext& ctx, std::vector<bool>& excluded,
                         EligibilityStats* stats);

  // The chain's filter names, in order.
  std::vector<std::string> names() const;

 private:
  std::array<uint8_t, kMaxCandidateFilters> chain_{};  // indexes into candidateFilters()
  size_t count_ = 0;
};

}  // namespace kvgate::routing
