// The optional external controller's view of an endpoint (seed 000, "Controller fold-in"): a
// state and a weight it sets through PUT /kvgate/v1/controller (admin/controller_api.cc), with
// the interval it promises to send them again in.
//
//   ACTIVE    the endpoint routes as usual;
//   DISABLED  masked from every tier (as if down);
//   DRAINING  takes no new sessions: only Tier 0 may still send a pinned conversation there;
//   weight    scales the endpoint's KV capacity in Tier 1.5's law (1 = neutral, (0, 100]).
// Staleness: within its interval the view holds; over the next interval the weight glides
// linearly back to 1 (never to 0) while the state holds; past two intervals without an update
// the endpoint is neutral again (ACTIVE, 1): a dead controller cannot keep an endpoint out.
#pragma once
#include <cstdint>

namespace kvgate::endpoints {

enum class ControllerState : int { kActive = 0, kDisabled = 1, kDraining = 2 };
inline const char* controllerStateName(ControllerState s) {
  return s == ControllerState::kDisabled   ? "DISABLED"
         : s == ControllerState::kDraining ? "DRAINING"
                                           : "ACTIVE";
}

struct ControllerView {
  ControllerState state = ControllerState::kActive;
  double weight = 1.0;
  bool stale = false;
};

// `interval_ns` 0: no controller spoke for this endpoint (neutral).
inline ControllerView controllerView(ControllerState state, double weight, int64_t updated_ns,
                                     int64_t interval_ns, int64_t now_ns) {
  ControllerView v;
  if (interval_ns <= 0) return v;
  const int64_t age = now_ns - updated_ns;
  if (age <= interval_ns) return {state, weight, false};
  if (age > 2 * interval_ns) return {ControllerState::kActive, 1.0, true};
  const double f = static_cast<double>(age - interval_ns) / static_cast<double>(interval_ns);
  return {state, weight + (1.0 - weight) * f, true};
}

}  // namespace kvgate::endpoints
