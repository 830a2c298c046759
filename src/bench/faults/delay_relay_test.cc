// The delay relay used by the quota-store benchmark and tests: it never delivers a byte earlier
// than its delay (one-sided: a busy machine may only make it later), relays both ways in order,
// and a half-close passes through (the upstream sees end of stream and its last answer still
// reaches the client before the pair closes).
#include "bench/faults/delay_relay.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace kvgate::bench {
namespace {

int listenLoopback(uint16_t& port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(s, 8);
  socklen_t n = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  port = ntohs(a.sin_port);
  return s;
}

int dial(uint16_t port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

std::string readAll(int fd) {
  std::string out;
  char b[4096];
  ssize_t n;
  while ((n = ::recv(fd, b, sizeof b, 0)) > 0) out.append(b, size_t(n));
  return out;
}

TEST(DelayRelay, DelaysEachWayAndPassesAHalfClose) {
  uint16_t up_port = 0;
  const int ls = listenLoopback(up_port);
  ASSERT_GE(ls, 0);
  // The upstream: echoes "pong:<what it read>" once its client half-closes, then closes.
  std::thread upstream([ls] {
    const int c = ::accept(ls, nullptr, nullptr);
    const std::string got = readAll(c);
    const std::string answer = "pong:" + got;
    [[maybe_unused]] auto n = ::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
    ::close(c);
  });
  DelayRelay relay({"127.0.0.1", 0}, {"127.0.0.1", up_port}, 30'000'000);  // 30 ms each way
  auto port = relay.start();
  ASSERT_TRUE(port.has_value());
  const int c = dial(*port);
  ASSERT_GE(c, 0);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::send(c, "ping", 4, 0), 4);
  ::shutdown(c, SHUT_WR);
  const std::string answer = readAll(c);  // (until the relay closes the pair)
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(answer, "pong:ping");
  EXPECT_GE(took, std::chrono::milliseconds(60));  // 30 ms there, 30 ms back, at the least
  ::close(c);
  upstream.join();
  ::close(ls);
  relay.stop();
}

TEST(DelayRelay, AnUpstreamThatIsNotListeningClosesTheClient) {
  uint16_t dead = 0;
  ::close(listenLoopback(dead));  // (a port nothing listens on any more)
  DelayRelay relay({"127.0.0.1", 0}, {"127.0.0.1", dead}, 1'000'000);
  auto port = relay.start();
  ASSERT_TRUE(port.has_value());
  const int c = dial(*port);
  ASSERT_GE(c, 0);
  [[maybe_unused]] auto n = ::send(c, "x", 1, MSG_NOSIGNAL);
  EXPECT_EQ(readAll(c), "");  // end of stream (or a reset), never a hang
  ::close(c);
}

}  // namespace
}  // namespace kvgate::bench
