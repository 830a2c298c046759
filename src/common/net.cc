#include "common/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <charconv>

namespace kvgate::net {

bool isIpLiteral(std::string_view s) {
  if (s.empty() || s.size() > 45) return false;
  std::string z(s);
  unsigned char buf[16];
  return inet_pton(AF_INET, z.c_str(), buf) == 1 || inet_pton(AF_INET6, z.c_str(), buf) == 1;
}

bool isLoopbackLiteral(std::string_view s) {
  if (s.size() > 2 && s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  if (s.empty() || s.size() > 64) return false;
  std::string z(s.substr(0, s.find('%')));
  in_addr v4{};
  if (inet_pton(AF_INET, z.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, z.c_str(), &v6) != 1) return false;
  return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
}

bool parseUint(std::string_view s, uint64_t max, uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v > max) return false;
  out = v;
  return true;
}

std::optional<HostPort> parseHostPort(std::string_view s) {
  HostPort hp;
  std::string_view port;
  if (!s.empty() && s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':')
      return std::nullopt;
    hp.host = std::string(s.substr(1, close - 1));
    port = s.substr(close + 2);
  } else {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    hp.host = std::string(s.substr(0, colon));
    port = s.substr(colon + 1);
  }
  uint64_t p = 0;
  if (!parseUint(port, 65535, p) || hp.host.empty()) return std::nullopt;
  hp.port = static_cast<uint16_t>(p);
  return hp;
}

}  // namespace kvgate::net
