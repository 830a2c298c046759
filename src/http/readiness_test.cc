// Own read readiness (readiness.h) over real loopback TCP sockets on one io_context: the facts
// the fast path rests on (the reactor raises the flag for an edge harvested while nothing waits;
// a drained socket's wait is completed by the next byte, a close, or a cancel), and that every
// byte is delivered once and in order.
#include "http/readiness.h"

#include <gtest/gtest.h>
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
    // Both registered with the reactor (as an async op does for the data plane's sockets).
    a.non_blocking(true);
    b.non_blocking(true);
  }
  void send(const std::string& s) {
    ASSERT_EQ(::send(a.native_handle(), s.data(), s.size(), 0), static_cast<ssize_t>(s.size()));
  }
  std::string recvAll(size_t room) {  // tryRecv until it would block
    std::string out;
    for (;;) {
      char buf[64];
      size_t got = 0;
      error_code ec;
      RecvResult r = tryRecv(b, buf, std::min(room, sizeof buf), got, ec);
      if (r != RecvResult::kBytes) return out;
      out.append(buf, got);
    }
  }
};

TEST(Readiness, BuildTracksReadinessItself) {
  // Debian 12's Boost 1.74 with epoll: the fast path must be compiled, or the benchmark figures in
  // docs/benchmarks.md do not describe this build.
  EXPECT_TRUE(ownReadiness());
}

TEST(Readiness, ShortReadAndEagainMarkDrainedAndNoSyscallFollows) {
  Pair p;
  p.send("hello");
  p.io.poll();  // (the reactor may harvest the edge first; either order must work)
  EXPECT_TRUE(mayBeReadable(p.b));
  char buf[64];
  size_t got = 0;
  error_code ec;
  ASSERT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec), RecvResult::kBytes);
  EXPECT_EQ(std::string(buf, got), "hello");
  EXPECT_FALSE(mayBeReadable(p.b));  // 5 < 64 bytes: drained
  // Known drained: no recv is made (nothing can be lost: no byte came since).
  EXPECT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec), RecvResult::kWouldBlock);
  EXPECT_EQ(got, 0u);
}

TEST(Readiness, FullReadLeavesTheSocketReadable) {
  Pair p;
  p.send("0123456789");
  char buf[4];
  size_t got = 0;
  error_code ec;
  ASSERT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec), RecvResult::kBytes);
  EXPECT_EQ(got, 4u);
  EXPECT_TRUE(mayBeReadable(p.b));  // the room was filled: more may wait
  EXPECT_EQ(p.recvAll(4), "456789");
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

TEST(Readiness, DrainedWaitCompletesOnTheNextByte) {
  Pair p;
  p.send("a");
  EXPECT_EQ(p.recvAll(64), "a");
  bool done = false;
  error_code wait_ec = asio::error::would_block;
  asyncWaitReadable(p.b, [&](error_code ec) {
    done = true;
    wait_ec = ec;
  });
  p.io.poll();
  EXPECT_FALSE(done);  // nothing to read: it waits
  p.send("b");
  for (int i = 0; i < 100 && !done; ++i) p.io.run_one_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(done);
  EXPECT_FALSE(wait_ec);
  EXPECT_EQ(p.recvAll(64), "b");
}

TEST(Readiness, WaitAfterAnUnreadEdgeCompletesAtOnce) {
  Pair p;
  p.send("a");
  p.io.poll();  // harvested with nothing waiting; nothing read
  bool done = false;
  asyncWaitReadable(p.b, [&](error_code) { done = true; });
  p.io.poll();
  EXPECT_TRUE(done);
  EXPECT_EQ(p.recvAll(64), "a");
}

TEST(Readiness, PeerCloseCompletesTheWaitAndReadsEof) {
  Pair p;
  p.send("z");
  EXPECT_EQ(p.recvAll(64), "z");
  bool done = false;
  asyncWaitReadable(p.b, [&](error_code) { done = true; });
  p.a.close();
  for (int i = 0; i < 100 && !done; ++i) p.io.run_one_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(done);
  char buf[8];
  size_t got = 0;
  error_code ec;
  EXPECT_EQ(tryRecv(p.b, buf, sizeof buf, got, ec), RecvResult::kEof);
}

TEST(Readiness, CancelAndCloseAbortAWait) {
  Pair p;
  p.send("z");
  EXPECT_EQ(p.recvAll(64), "z");
  error_code got_ec;
  bool done = false;
  asyncWaitReadable(p.b, [&](error_code ec) {
    done = true;
    got_ec = ec;
  });
  p.b.cancel();
  p.io.poll();
  ASSERT_TRUE(done);
  EXPECT_EQ(got_ec, asio::error::operation_aborted);
  done = false;
  asyncWaitReadable(p.b, [&](error_code ec) {
    done = true;
    got_ec = ec;
  });
  p.b.close();
  p.io.poll();
  ASSERT_TRUE(done);
  EXPECT_EQ(got_ec, asio::error::operation_aborted);
  char buf[8];
  size_t n = 0;
  error_code ec;
  EXPECT_EQ(tryRecv(p.b, buf, sizeof buf, n, ec), RecvResult::kError);  // closed: no recv
}

// A byte stream in pieces, read the way the data plane reads (try, else wait): every byte once,
// in order, however the sends and reads interleave.
TEST(Readiness, StreamArrivesWholeThroughTryAndWait) {
  Pair p;
  std::string sent, got;
  for (int i = 0; i < 200; ++i) {
    std::string piece(static_cast<size_t>(1 + (i * 37) % 97), static_cast<char>('a' + i % 26));
    sent += piece;
    p.send(piece);
    if (i % 3 == 0) p.io.poll();  // sometimes the reactor harvests before the read
    while (got.size() < sent.size()) {
      char buf[50];  // smaller than some pieces: full reads too
      size_t n = 0;
      error_code ec;
      RecvResult r = tryRecv(p.b, buf, sizeof buf, n, ec);
      if (r == RecvResult::kBytes) {
        got.append(buf, n);
        continue;
      }
      ASSERT_EQ(r, RecvResult::kWouldBlock);
      bool done = false;  // the data plane's wait: the reactor's edge must come
      asyncWaitReadable(p.b, [&](error_code) { done = true; });
      for (int t = 0; t < 100 && !done; ++t) p.io.run_one_for(std::chrono::milliseconds(50));
      ASSERT_TRUE(done) << "a wait missed bytes at piece " << i;
    }
    ASSERT_EQ(got, sent) << "piece " << i;
  }
}

}  // namespace
}  // namespace kvgate::http
