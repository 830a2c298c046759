// Address helpers shared by the proxy, the simulator and the management API.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvgate::net {

// True for a literal IPv4 or IPv6 address (no host names).
bool isIpLiteral(std::string_view s);
// True for a literal loopback address: 127.0.0.0/8, ::1, or IPv4-mapped ::ffff:127.x.y.z (an
// IPv6 literal may be bracketed and carry a %zone). Host names, "localhost" included, are not.
bool isLoopbackLiteral(std::string_view s);
// "host:port" or "[v6]:port" -> pieces; nullopt when malformed or the port is out of range.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
std::optional<HostPort> parseHostPort(std::string_view s);
// A port in "a-b" or a single value; returns false when malformed.
bool parseUint(std::string_view s, uint64_t max, uint64_t& out);

}  // namespace kvgate::net
