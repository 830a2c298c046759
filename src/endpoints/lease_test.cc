// EndpointLease: what a request holds on an endpoint is given back on every path.
#include "endpoints/lease.h"

#include <gtest/gtest.h>

#include "common/clock.h"

namespace kvgate::endpoints {
namespace {

TEST(EndpointLease, QueuedPrefillIsGivenBackAtTheFirstByteOrTheEnd) {
  common::ManualClock clock;
  EndpointState s(1, "127.0.0.1", 8000, clock);
  {
    EndpointLease a(s, false);
    a.addPrefill(120);
    a.addPrefill(7);  // a second call does not add again
    EXPECT_EQ(s.active.load(), 1);
    EXPECT_EQ(s.pending_prefill_blocks.load(), 120);
    a.prefillDone();  // first response byte
    EXPECT_EQ(s.pending_prefill_blocks.load(), 0);
    a.prefillDone();  // once only
    EXPECT_EQ(s.pending_prefill_blocks.load(), 0);
  }
  EXPECT_EQ(s.active.load(), 0);
  {
    // No first byte (an error, a client that left): the end gives it back; a moved-from lease
    // gives nothing back twice.
    EndpointLease b(s, false);
    b.addPrefill(50);
    EndpointLease c(std::move(b));
    EXPECT_EQ(s.pending_prefill_blocks.load(), 50);
    b.reset();
    EXPECT_EQ(s.pending_prefill_blocks.load(), 50);
    EndpointLease d;
    d = std::move(c);
    EXPECT_EQ(s.pending_prefill_blocks.load(), 50);
    EXPECT_EQ(s.active.load(), 1);
  }
  EXPECT_EQ(s.pending_prefill_blocks.load(), 0);
  EXPECT_EQ(s.active.load(), 0);
  EndpointLease none;
  none.addPrefill(5);  // no endpoint: nothing counted
  EXPECT_EQ(s.pending_prefill_blocks.load(), 0);
}

}  // namespace
}  // namespace kvgate::endpoints
