// sel 1's rendezvous hashing (l4_hash.h, the same code the L4 program runs): flows spread evenly
// over 2-64 endpoints, whether they differ by address or by port; an endpoint added takes only
// flows, about 1/(n+1) of them, and gives none to the others; one removed (or down) gives back
// only its own. Expected values are the hand calculation of an even split.
#include "l4/l4_hash.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <random>
#include <vector>

namespace {

struct Ep {
  __u32 ip;
  __u16 port;
};

struct Flow {
  __u32 saddr;
  __u16 sport;
  __u8 proto;
};

// The program's scan: the endpoint scoring highest, the first in list order on a tie.
int pick(const std::vector<Ep>& eps, const Flow& f) {
  const __u32 h = l4_flow_hash(f.saddr, f.sport, f.proto);
  int best = -1;
  __u32 best_score = 0;
  for (size_t i = 0; i < eps.size(); ++i) {
    const __u32 s = l4_rendezvous_score(h, eps[i].ip, eps[i].port);
    if (best < 0 || s > best_score) {
      best = static_cast<int>(i);
      best_score = s;
    }
  }
  return best;
}

// n endpoints on consecutive addresses 198.18.1.1.. (port 8080), or on one address with
// consecutive ports 8080..
std::vector<Ep> endpoints(size_t n, bool by_port) {
  std::vector<Ep> eps;
  for (size_t i = 0; i < n; ++i) {
    const __u32 host = by_port ? 0xC6120101u : 0xC6120100u + static_cast<__u32>(i + 1);
    const __u16 port = static_cast<__u16>(by_port ? 8080 + i : 8080);
    eps.push_back({htonl(host), htons(port)});
  }
  return eps;
}

// Clients of 198.18.0.0/15 with random ports, TCP and UDP alike.
std::vector<Flow> flows(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Flow> out;
  for (size_t i = 0; i < count; ++i) {
    const __u32 host = 0xC6120000u | (rng() & 0x1FFFFu);
    out.push_back({htonl(host), htons(static_cast<__u16>(1024 + rng() % 64000)),
                   static_cast<__u8>(i % 2 ? 6 : 17)});
  }
  return out;
}

TEST(L4Rendezvous, SpreadsFlowsEvenly) {
  for (bool by_port : {false, true})
    for (size_t n : {2u, 3u, 4u, 7u, 16u, 33u, 64u}) {
      const auto eps = endpoints(n, by_port);
      const size_t per = 2000;  // flows per endpoint expected; a binomial sd of about 45
      const auto fl = flows(per * n, static_cast<uint32_t>(n * 7 + by_port));
      std::vector<size_t> count(n, 0);
      for (const auto& f : fl) ++count[static_cast<size_t>(pick(eps, f))];
      for (size_t i = 0; i < n; ++i) {
        EXPECT_GT(count[i], per * 85 / 100)
            << "n " << n << " endpoint " << i << " by_port " << by_port;
        EXPECT_LT(count[i], per * 115 / 100)
            << "n " << n << " endpoint " << i << " by_port " << by_port;
      }
    }
}

TEST(L4Rendezvous, AnEndpointAddedTakesOnlyItsShare) {
  for (bool by_port : {false, true})
    for (size_t n : {1u, 2u, 4u, 8u, 63u}) {
      auto eps = endpoints(n + 1, by_port);
      const Ep added = eps.back();
      eps.pop_back();
      const auto fl = flows(20000, static_cast<uint32_t>(n + 100 * by_port));
      auto grown = eps;
      grown.insert(grown.begin() + static_cast<long>(n / 2), added);  // (anywhere in the list)
      size_t moved = 0;
      for (const auto& f : fl) {
        const Ep before = eps[static_cast<size_t>(pick(eps, f))];
        const Ep after = grown[static_cast<size_t>(pick(grown, f))];
        if (before.ip == after.ip && before.port == after.port) continue;
        ++moved;
        // a flow that moves goes to the new endpoint, never from one old endpoint to another
        ASSERT_EQ(after.ip, added.ip);
        ASSERT_EQ(after.port, added.port);
      }
      const double share = double(moved) / double(fl.size());
      EXPECT_GT(share, 0.8 / double(n + 1)) << "n " << n;
      EXPECT_LT(share, 1.2 / double(n + 1)) << "n " << n;
    }
}

TEST(L4Rendezvous, AnEndpointRemovedGivesBackOnlyItsOwn) {
  for (size_t n : {2u, 3u, 16u, 64u}) {
    const auto eps = endpoints(n, false);
    const auto fl = flows(10000, static_cast<uint32_t>(n + 5));
    for (size_t gone : {size_t{0}, n / 2, n - 1}) {
      auto left = eps;
      left.erase(left.begin() + static_cast<long>(gone));
      std::vector<size_t> spread(n, 0);
      for (const auto& f : fl) {
        const size_t before = static_cast<size_t>(pick(eps, f));
        const Ep after = left[static_cast<size_t>(pick(left, f))];
        if (before != gone) {
          // (an untouched flow stays put)
          ASSERT_EQ(after.ip, eps[before].ip);
          ASSERT_EQ(after.port, eps[before].port);
        } else {
          for (size_t i = 0; i < n; ++i)
            if (eps[i].ip == after.ip && eps[i].port == after.port) ++spread[i];
        }
      }
      // the removed endpoint's flows go to the others, not all to one neighbour
      if (n >= 3 && n <= 16) {  // (about 40 flows for each receiver, none left out by chance)
        size_t receivers = 0;
        for (size_t c : spread) receivers += c > 0;
        EXPECT_EQ(receivers, n - 1) << "n " << n << " gone " << gone;
      }
    }
  }
}

// The exact values the program computed before the hash moved into l4_hash.h (computed apart, in
// Python, from the inline code it replaced: the same 32-bit arithmetic, addresses and ports in
// network byte order as the program reads them on a little-endian host): a flow keeps its
// endpoint across an upgrade.
TEST(L4Rendezvous, ScoresAreTheProgramsOwn) {
  struct V {
    const char* client;
    uint16_t sport;
    uint8_t proto;
    const char* endpoint;
    uint16_t port;
    uint32_t flow_hash, score;
  };
  for (const V& v : std::initializer_list<V>{
           {"198.18.0.7", 40000, 6, "198.18.1.2", 8080, 0xca161f80u, 0x2087f551u},
           {"198.18.3.200", 1024, 17, "198.18.1.3", 53, 0xa8a41a1bu, 0xa7cb66c6u},
           {"198.19.255.254", 65535, 6, "198.18.1.64", 443, 0xa72cdbb0u, 0x453cde62u},
       }) {
    in_addr c{}, e{};
    ASSERT_EQ(inet_pton(AF_INET, v.client, &c), 1);
    ASSERT_EQ(inet_pton(AF_INET, v.endpoint, &e), 1);
    const __u32 h = l4_flow_hash(c.s_addr, htons(v.sport), v.proto);
    EXPECT_EQ(h, v.flow_hash) << v.client;
    EXPECT_EQ(l4_rendezvous_score(h, e.s_addr, htons(v.port)), v.score) << v.client;
  }
}

}  // namespace
