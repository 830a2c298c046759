// EventPlane options for tests: fast polls, 1 MiB messages, the given receive high-water mark,
// no replay cooldown.
#pragma once
#include "events/event_plane.h"

namespace kvgate::testing {

inline events::EventPlaneOptions testOptions(int rcv_hwm) {
  events::EventPlaneOptions o;
  o.poll_ms = 10;
  o.max_message_bytes = 1 << 20;
  o.rcv_hwm = rcv_hwm;
  o.replay_cooldown_ms = 0;  // scenario tests replay gap after gap; the cooldown has its own test
  return o;
}

}  // namespace kvgate::testing
