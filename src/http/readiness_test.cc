// Own read readiness (readiness.h) over real loopback TCP sockets on one io_context: the facts
// the fast path rests on (the reactor raises the flag for an edge harvested while nothing waits;
// a short read proves the socket drained only after an edge that reported no close; a drained
// socket's wait is completed by the next byte, a close, or a cancel), and that every byte and the
// end of the stream are delivered, once and in order.
#include "http/readiness.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <string>

namespace kvgate::http {
namespace {

struct Pair {
  asio::io_context io{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};  // as the workers run it
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  tcp::socket a{io}, b{io};
  Pair() {
    tcp::acceptor acc(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    a.connect(acc.local_endpoint());
    acc.accept(b);
    a.non_blocking(true);
    b.non_blocking(true);
  }
  void send(const std::string& s) {
    ASSERT_EQ(::send(a.native_handle(), s.data(), s.size(), 0), static_cast<ssize_t>(s.size()));
  }
  // tryRecv until it would block or the stream ends (eof set).
  std::string recvAll(size_t room, uint32_t woke_by = kUnknownEvents, bool* eof = nullptr) {
    std::string out;
    for (;;) {
      char buf[64];
      size_t got = 0;
      error_code ec;
      RecvResult r = tryRecv(b, buf, std::min(room, sizeof buf), got, ec, woke_by);
      woke_by = kUnknownEvents;  // (only the first recv after a wait follows its edge)
      if (r == RecvResult::kEof && eof) *eof = true;
      if (r != RecvResult::kBytes) return out;
      out.append(buf, got);
    }
  }
  // Queues a wait on b and runs the loop until it completes; the events that woke it.
  uint32_t waitForEdge(error_code* out_ec = nullptr) {
    bool done = false;
    uint32_t events = 0;
    error_code e;
    asyncWaitReadable(b, [&](error_code ec, uint32_t ev) {
      done = true;
      e = ec;
      events = ev;
    });
    for (int i = 0; i < 100 && !done; ++i) io.run_one_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(done) << "the wait was never completed";
    if (out_ec) *out_ec = e;
    return events;
  }
};

TEST(Readiness, BuildTracksReadinessItself) {
  // Debian 12's Boost 1.74 with epoll: the fast path must be compiled, or the benchmark figures in
  // docs/benchmarks.md do not describe this build.
  EXPECT_TRUE(ownReadiness());
}

TEST(Readiness, EagainProvesDrainedAndNoSyscallFollows) {
  Pair p;
  p.send("hello");
  EXPECT_TRUE(mayBeReadable(p.b));
  EXPECT_EQ(p.recvAll(64), "hello");  // ends with a recv that found nothing
  EXPECT_FALSE(mayBeReadable(p.b));
  char buf[8];
  size_t got = 7;
  error_code ec;
  EXPECT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec), RecvResult::kWouldBlock);
  EXPECT_EQ(got, 0u);
}

TEST(Readiness, ShortReadAloneProvesNothing) {
  Pair p;
  p.send("hello");
  char buf[64];
  size_t got = 0;
  error_code ec;
  ASSERT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec), RecvResult::kBytes);
  EXPECT_EQ(std::string(buf, got), "hello");
  EXPECT_TRUE(mayBeReadable(p.b));  // a FIN may wait behind the bytes
}

TEST(Readiness, FullReadLeavesTheSocketReadable) {
  Pair p;
  watchPeerClose(p.b);
  EXPECT_EQ(p.recvAll(64), "");
  p.send("0123456789");
  uint32_t ev = p.waitForEdge();
  char buf[4];
  size_t got = 0;
  error_code ec;
  ASSERT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec, ev), RecvResult::kBytes);
  EXPECT_EQ(got, 4u);
  EXPECT_TRUE(mayBeReadable(p.b));  // the room was filled: more may wait
  EXPECT_EQ(p.recvAll(4), "456789");
}

TEST(Readiness, ShortReadAfterAnEdgeWithoutCloseProvesDrained) {
  Pair p;
  watchPeerClose(p.b);
  EXPECT_EQ(p.recvAll(64), "");  // drained (EAGAIN)
  p.send("x");
  uint32_t ev = p.waitForEdge();
  ASSERT_NE(ev, kUnknownEvents);
  EXPECT_TRUE(ev & EPOLLIN);
  EXPECT_FALSE(ev & EPOLLRDHUP);
  char buf[64];
  size_t got = 0;
  error_code ec;
  ASSERT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec, ev), RecvResult::kBytes);
  EXPECT_EQ(std::string(buf, got), "x");
  EXPECT_FALSE(mayBeReadable(p.b));  // no syscall for the next read
}

// The wait's completion may run after a later epoll_wait (the reactor defers every completed op
// but the first of a descriptor's edge): bytes and a FIN that came after the edge that woke it
// are harvested while nothing waits. The short read of them all must not hide the FIN.
TEST(Readiness, AnEdgeHarvestedBeforeTheRecvIsNotLost) {
  Pair p;
  watchPeerClose(p.b);
  EXPECT_EQ(p.recvAll(64), "");
  p.send("one ");
  uint32_t ev = p.waitForEdge();  // the edge of "one " is handed to the next recv...
  ASSERT_NE(ev, kUnknownEvents);
  ASSERT_FALSE(ev & EPOLLRDHUP);
  p.send("two");
  p.a.shutdown(tcp::socket::shutdown_send);
  p.io.poll();  // ...but an epoll_wait harvests the later bytes and the FIN first
  char buf[64];
  size_t got = 0;
  error_code ec;
  ASSERT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec, ev), RecvResult::kBytes);
  EXPECT_EQ(std::string(buf, got), "one two");  // short, after an edge without RDHUP
  EXPECT_TRUE(mayBeReadable(p.b)) << "the later edge was forgotten";
  bool eof = false;
  EXPECT_EQ(p.recvAll(64, kUnknownEvents, &eof), "");
  EXPECT_TRUE(eof) << "the FIN was lost";
}

// A recv stops short at TCP's urgent mark: the edge reports EPOLLPRI, and the bytes behind the
// mark must still be read without a further edge.
TEST(Readiness, UrgentDataDoesNotPassForDrained) {
  Pair p;
  watchPeerClose(p.b);
  EXPECT_EQ(p.recvAll(64), "");
  p.send("abc");
  ASSERT_EQ(::send(p.a.native_handle(), "!", 1, MSG_OOB), 1);
  p.send("def");
  uint32_t ev = p.waitForEdge();
  ASSERT_NE(ev, kUnknownEvents);
  EXPECT_TRUE(ev & EPOLLPRI) << ev;
  std::string got = p.recvAll(64, ev);
  // The urgent byte is taken out of band (no SO_OOBINLINE); every byte of the stream arrives.
  EXPECT_EQ(got, "abcdef");
}

// Bytes and the peer's FIN in one edge: the short read must not be taken as drained, or the
// close would never be seen (no further edge comes). nginx's pending_eof; a P/D prefill engine
// that cut its answer found it.
TEST(Readiness, BytesAndCloseInOneEdgeStillEndTheStream) {
  for (bool watched : {true, false}) {
    Pair p;
    if (watched) watchPeerClose(p.b);
    EXPECT_EQ(p.recvAll(64), "");
    p.send("bye");
    p.a.shutdown(tcp::socket::shutdown_send);  // both before the loop harvests anything
    uint32_t ev = p.waitForEdge();
    if (watched) {
      EXPECT_TRUE(ev & EPOLLRDHUP) << ev;
    }
    bool eof = false;
    EXPECT_EQ(p.recvAll(64, ev, &eof), "bye") << watched;
    EXPECT_TRUE(eof) << "the close behind the bytes was lost (watched " << watched << ")";
  }
}

// Asio re-arms epoll with its own mask when a write has to wait (EPOLLOUT): the EPOLLRDHUP
// registration must survive it.
TEST(Readiness, PeerCloseWatchSurvivesAsioWriteWait) {
  Pair p;
  watchPeerClose(p.b);
  EXPECT_EQ(p.recvAll(64), "");
  // b writes more than the loopback buffers hold to a that does not read: the write waits on
  // EPOLLOUT, which Asio registers with an epoll_ctl of its own.
  std::string big(64 << 20, 'w');
  bool wrote = false;
  asio::async_write(p.b, asio::buffer(big), [&](error_code, size_t) { wrote = true; });
  p.io.poll();
  ASSERT_FALSE(wrote);
  p.send("bye");
  p.a.shutdown(tcp::socket::shutdown_send);
  uint32_t ev = p.waitForEdge();
  EXPECT_TRUE(ev & EPOLLRDHUP) << ev;
  bool eof = false;
  EXPECT_EQ(p.recvAll(64, ev, &eof), "bye");
  EXPECT_TRUE(eof);
  p.b.cancel();
  p.io.poll();
}

// The fact the fast path rests on: bytes that arrive after a drain, while no read is queued,
// raise the flag when the reactor harvests their edge, so they are read, never waited for.
TEST(Readiness, EdgeHarvestedWhileNothingWaitsRaisesTheFlag) {
  Pair p;
  p.send("x");
  EXPECT_EQ(p.recvAll(64), "x");
  ASSERT_FALSE(mayBeReadable(p.b));
  p.send("late");
  p.io.poll();  // epoll_wait runs with no op queued for b
  EXPECT_TRUE(mayBeReadable(p.b));
  EXPECT_EQ(p.recvAll(64), "late");
}

TEST(Readiness, DrainedWaitCompletesOnTheNextByteOnly) {
  Pair p;
  p.send("a");
  EXPECT_EQ(p.recvAll(64), "a");
  bool done = false;
  error_code wait_ec = asio::error::would_block;
  uint32_t events = kUnknownEvents;
  asyncWaitReadable(p.b, [&](error_code ec, uint32_t ev) {
    done = true;
    wait_ec = ec;
    events = ev;
  });
  p.io.poll();
  EXPECT_FALSE(done);  // nothing to read: it waits
  p.send("b");
  for (int i = 0; i < 100 && !done; ++i) p.io.run_one_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(done);
  EXPECT_FALSE(wait_ec);
  EXPECT_NE(events, kUnknownEvents);
  EXPECT_EQ(p.recvAll(64, events), "b");  // the edge was handed to this recv
}

TEST(Readiness, WaitAfterAnUnreadEdgeCompletesAtOnce) {
  Pair p;
  p.send("a");
  p.io.poll();  // harvested with nothing waiting; nothing read
  bool done = false;
  uint32_t events = 0;
  asyncWaitReadable(p.b, [&](error_code, uint32_t ev) {
    done = true;
    events = ev;
  });
  p.io.poll();
  EXPECT_TRUE(done);
  EXPECT_EQ(events, kUnknownEvents);  // no edge of its own behind it
  EXPECT_EQ(p.recvAll(64), "a");
}

TEST(Readiness, PeerCloseCompletesTheWaitAndReadsEof) {
  Pair p;
  p.send("z");
  EXPECT_EQ(p.recvAll(64), "z");
  bool done = false;
  uint32_t events = kUnknownEvents;
  asyncWaitReadable(p.b, [&](error_code, uint32_t ev) {
    done = true;
    events = ev;
  });
  p.a.close();
  for (int i = 0; i < 100 && !done; ++i) p.io.run_one_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(done);
  char buf[8];
  size_t got = 0;
  error_code ec;
  EXPECT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec, events), RecvResult::kEof);
  EXPECT_TRUE(mayBeReadable(p.b));  // an ended stream keeps answering its end
}

// The pool's reuse check: a peek that finds nothing proves the socket empty (no syscall for the
// next check); bytes or a close that arrive later are found.
TEST(Readiness, HoldsNothingPeeksOnlyWhenSomethingMayHaveCome) {
  Pair p;
  p.send("reply");
  EXPECT_EQ(p.recvAll(64), "reply");
  EXPECT_TRUE(holdsNothing(p.b));  // known drained
  p.send("stray");
  p.io.poll();  // the edge is harvested while the connection idles
  EXPECT_FALSE(holdsNothing(p.b)) << "bytes nobody asked for must discard the connection";
  EXPECT_EQ(p.recvAll(64), "stray");  // (the peek consumed nothing)
  Pair q;
  q.send("x");
  char buf[8];
  size_t got = 0;
  error_code ec;
  ASSERT_EQ(tryRecv(q.b, buf, sizeof buf, got, ec), RecvResult::kBytes);  // short: unproven
  EXPECT_TRUE(mayBeReadable(q.b));
  EXPECT_TRUE(holdsNothing(q.b));    // the peek finds nothing...
  EXPECT_FALSE(mayBeReadable(q.b));  // ...and says so for the next check
  q.a.shutdown(tcp::socket::shutdown_send);
  q.io.poll();
  EXPECT_FALSE(holdsNothing(q.b)) << "a close while idle must discard the connection";
}

TEST(Readiness, CancelAndCloseAbortAWait) {
  Pair p;
  p.send("z");
  EXPECT_EQ(p.recvAll(64), "z");
  error_code got_ec;
  bool done = false;
  auto h = [&](error_code ec, uint32_t) {
    done = true;
    got_ec = ec;
  };
  asyncWaitReadable(p.b, h);
  p.b.cancel();
  p.io.poll();
  ASSERT_TRUE(done);
  EXPECT_EQ(got_ec, asio::error::operation_aborted);
  done = false;
  asyncWaitReadable(p.b, h);
  p.b.close();
  p.io.poll();
  ASSERT_TRUE(done);
  EXPECT_EQ(got_ec, asio::error::operation_aborted);
  char buf[8];
  size_t n = 0;
  error_code ec;
  EXPECT_EQ(tryRecv(p.b, buf, sizeof buf, n, ec), RecvResult::kError);  // closed: no recv
}

// A byte stream in pieces, read the way the data plane reads (try; else wait, then try with the
// events that woke it), ending with the peer's close sent right behind the last piece: every byte
// once, in order, then the end, however the sends, harvests and reads interleave.
TEST(Readiness, StreamAndItsEndArriveWholeThroughTryAndWait) {
  for (bool watched : {true, false}) {
    Pair p;
    if (watched) watchPeerClose(p.b);
    std::string sent, got;
    bool eof = false;
    for (int i = 0; i < 200 && !eof; ++i) {
      std::string piece(static_cast<size_t>(1 + (i * 37) % 97), static_cast<char>('a' + i % 26));
      sent += piece;
      p.send(piece);
      if (i == 199) p.a.shutdown(tcp::socket::shutdown_send);
      if (i % 3 == 0) p.io.poll();  // sometimes the reactor harvests before the read
      uint32_t woke_by = kUnknownEvents;
      while (got.size() < sent.size() || (i == 199 && !eof)) {
        char buf[50];  // smaller than some pieces: full reads too
        size_t n = 0;
        error_code ec;
        RecvResult r = tryRecv(p.b, buf, sizeof buf, n, ec, woke_by);
        woke_by = kUnknownEvents;
        if (r == RecvResult::kBytes) {
          got.append(buf, n);
          continue;
        }
        if (r == RecvResult::kEof) {
          eof = true;
          break;
        }
        ASSERT_EQ(r, RecvResult::kWouldBlock);
        woke_by = p.waitForEdge();
      }
      ASSERT_EQ(got, sent) << "piece " << i;
    }
    EXPECT_TRUE(eof) << "watched " << watched;
  }
}

}  // namespace
}  // namespace kvgate::http
