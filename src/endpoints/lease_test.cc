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
    a.addPrefill(120, 16, 0);
    a.addPrefill(7, 16, 0);  // a second call does not add again
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
    b.addPrefill(50, 16, 0);
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
  EXPECT_EQ(s.pending_prefill_tokens.load(), 0);
  EXPECT_EQ(s.prefill_rate.samples(), 0u);  // no first byte with a time: no rate sample
  EXPECT_EQ(s.active.load(), 0);
  EndpointLease none;
  none.addPrefill(5, 16, 0);  // no endpoint: nothing counted
  EXPECT_EQ(s.pending_prefill_blocks.load(), 0);
}

// A stream past its first token is counted as started until its lease ends, once, on every path
// (moves included); a lease without an endpoint counts nothing.
TEST(EndpointLease, StartedStreamsAreCountedOnceUntilTheEnd) {
  common::ManualClock clock;
  EndpointState s(1, "127.0.0.1", 8000, clock);
  {
    EndpointLease a(s, false);
    EXPECT_EQ(s.started_streams.load(), 0);
    a.markStarted();
    a.markStarted();  // once only
    EXPECT_EQ(s.started_streams.load(), 1);
    EndpointLease b(std::move(a));
    a.reset();  // the moved-from lease gives nothing back
    EXPECT_EQ(s.started_streams.load(), 1);
    EndpointLease c;
    c = std::move(b);
    EXPECT_EQ(s.started_streams.load(), 1);
    c.reset();
    EXPECT_EQ(s.started_streams.load(), 0);
    c.reset();
    EXPECT_EQ(s.started_streams.load(), 0);
    EndpointLease d(s, false);
    d.markStarted();
    EXPECT_EQ(s.started_streams.load(), 1);
  }  // (d's destructor)
  EXPECT_EQ(s.started_streams.load(), 0);
  EXPECT_EQ(s.active.load(), 0);
  EndpointLease none;
  none.markStarted();
  EXPECT_EQ(s.started_streams.load(), 0);
}

// The prefill rate, sampled at first bytes (endpoints/prefill_rate.h), by hand: a request sent
// with 10 blocks (160 tokens) queued ahead and 6 of its own (96 tokens), first byte 0.5 s later:
// 256 tokens / 0.5 s = 512 tokens/s. A second: nothing ahead, 64 blocks (1024 tokens) in 1 s:
// 512 + 0.1 x (1024 - 512) = 563.2. Under 64 tokens (3 blocks of 16 = 48): skipped.
TEST(EndpointLease, FirstBytesSampleThePrefillRate) {
  common::ManualClock clock;
  EndpointState s(1, "127.0.0.1", 8000, clock);
  EXPECT_EQ(s.prefill_rate.tokensPerSecond(), 0.0);
  EndpointLease ahead(s, false);
  ahead.addPrefill(10, 16, 0);  // queued before the request, still waiting
  EndpointLease a(s, false);
  a.addPrefill(6, 16, 1'000'000'000);
  EXPECT_EQ(s.pending_prefill_tokens.load(), 256);
  a.prefillDone(1'500'000'000);
  EXPECT_DOUBLE_EQ(s.prefill_rate.tokensPerSecond(), 512.0);
  ahead.reset();  // (ended without a first byte: no sample)
  EXPECT_EQ(s.prefill_rate.samples(), 1u);
  EndpointLease b(s, false);
  b.addPrefill(64, 16, 2'000'000'000);
  b.prefillDone(3'000'000'000);
  EXPECT_DOUBLE_EQ(s.prefill_rate.tokensPerSecond(), 563.2);
  EndpointLease tiny(s, false);
  tiny.addPrefill(3, 16, 4'000'000'000);
  tiny.prefillDone(4'001'000'000);
  EXPECT_EQ(s.prefill_rate.samples(), 2u);
  EXPECT_EQ(s.pending_prefill_tokens.load(), 0);
}

// The admission gate's hand-off: a lease that ends hands its slot to the first request still
// parked (the in-flight count stays: no newcomer can take the slot in between); a parked request
// that gave up is skipped; nobody parked: the count falls.
TEST(EndpointLease, AFreedSlotGoesToTheFirstParkedRequest) {
  common::ManualClock clock;
  EndpointState s(1, "10.0.0.1", 80, clock);
  using W = AdmissionQueue::Waiter;
  auto w1 = std::make_shared<W>(), w2 = std::make_shared<W>(), w3 = std::make_shared<W>();
  int woken = 0;
  for (auto& w : {w1, w2, w3}) w->wake = [&woken] { ++woken; };
  ASSERT_TRUE(s.admission.push(w1, 2, s.queued));
  ASSERT_TRUE(s.admission.push(w2, 2, s.queued));
  EXPECT_FALSE(s.admission.push(w3, 2, s.queued));  // the queue holds 2
  EXPECT_EQ(s.queued.load(), 2);
  {
    EndpointLease a(s, false);
    EndpointLease b(s, false);
    EXPECT_EQ(s.active.load(), 2);
    EXPECT_TRUE(w1->giveUp());  // w1 timed out (and is about to leave the queue)
    a.reset();                  // skips w1, grants w2
    EXPECT_EQ(w2->state.load(), W::kGranted);
    EXPECT_EQ(woken, 1);
    EXPECT_FALSE(w2->giveUp());     // too late to give up: the slot is w2's
    EXPECT_EQ(s.active.load(), 2);  // handed over, still counted
    EXPECT_EQ(s.queued.load(), 0);
    EndpointLease c(s, false, EndpointLease::Adopt{});  // w2 takes its slot
    EXPECT_EQ(s.active.load(), 2);
  }  // b and c end; nobody waits
  EXPECT_EQ(s.active.load(), 0);
  EXPECT_EQ(woken, 1);
  // A waiter that gives up and leaves: the depth gauge follows.
  auto w4 = std::make_shared<W>();
  ASSERT_TRUE(s.admission.push(w4, 2, s.queued));
  EXPECT_TRUE(w4->giveUp());
  s.admission.remove(w4.get(), s.queued);
  EXPECT_EQ(s.queued.load(), 0);
  EXPECT_EQ(s.admission.depth(), 0u);
}

}  // namespace
}  // namespace kvgate::endpoints
