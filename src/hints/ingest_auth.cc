#include "hints/ingest_auth.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace kvgate::hints {

bool isLoopbackPeer(std::string_view peer) {
  if (peer.starts_with("unix:")) return true;
  std::string addr;
  if (peer.starts_with("ipv4:")) {
    std::string_view a = peer.substr(5);
    addr.assign(a.substr(0, a.rfind(':')));
    in_addr v4{};
    return inet_pton(AF_INET, addr.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
  }
  if (peer.starts_with("ipv6:")) {
    // gRPC writes "ipv6:[::1]:port", URI-escaped as "ipv6:%5B::1%5D:port" by newer versions.
    std::string a(peer.substr(5));
    for (std::string_view esc : {"%5B", "%5b"})
      if (a.starts_with(esc)) a.replace(0, 3, "[");
    size_t close = a.find("%5D");
    if (close == std::string::npos) close = a.find("%5d");
    if (close != std::string::npos) a.replace(close, 3, "]");
    if (a.empty() || a.front() != '[' || (close = a.find(']')) == std::string::npos) return false;
    addr = a.substr(1, close - 1);
    if (const size_t zone = addr.find('%'); zone != std::string::npos) addr.resize(zone);
    in6_addr v6{};
    if (inet_pton(AF_INET6, addr.c_str(), &v6) != 1) return false;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

namespace {
std::array<unsigned char, 32> digest(std::string_view s) {
  std::array<unsigned char, 32> d{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}
}  // namespace

IngestAuth::IngestAuth(std::vector<std::string> tokens_in) {
  for (const auto& t : tokens_in) digests_.push_back(digest(t));
}

IngestAuth::Verdict IngestAuth::check(std::string_view authorization, std::string_view peer) const {
  if (!digests_.empty()) {
    static constexpr std::string_view kBearer = "Bearer ";
    if (authorization.size() <= kBearer.size() ||
        authorization.substr(0, kBearer.size()) != kBearer)
      return Verdict::kUnauthenticated;
    // Digests of equal size compared in full: the time says nothing of a token's length or of
    // which token matched.
    const auto got = digest(authorization.substr(kBearer.size()));
    bool ok = false;
    for (const auto& d : digests_) ok |= CRYPTO_memcmp(d.data(), got.data(), d.size()) == 0;
    return ok ? Verdict::kOk : Verdict::kUnauthenticated;
  }
  if (client_certs || insecure) return Verdict::kOk;
  return isLoopbackPeer(peer) ? Verdict::kOk : Verdict::kNotLoopback;
}

}  // namespace kvgate::hints
