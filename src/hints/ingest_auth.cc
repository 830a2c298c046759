#include "hints/ingest_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "common/net.h"

namespace kvgate::hints {

bool isLoopbackPeer(std::string_view peer) {
  if (peer.starts_with("unix:")) return true;
  if (peer.starts_with("ipv4:")) {
    const std::string_view a = peer.substr(5);
    return net::isLoopbackLiteral(a.substr(0, a.rfind(':')));
  }
  if (peer.starts_with("ipv6:")) {
    // gRPC writes "ipv6:[::1]:port", URI-escaped as "ipv6:%5B::1%5D:port" by newer versions.
    std::string a(peer.substr(5));
    for (std::string_view esc : {"%5B", "%5b"})
      if (a.starts_with(esc)) a.replace(0, 3, "[");
    for (std::string_view esc : {"%5D", "%5d"})
      if (const size_t at = a.find(esc); at != std::string::npos) a.replace(at, 3, "]");
    const size_t close = a.find(']');
    return !a.empty() && a.front() == '[' && close != std::string::npos &&
           net::isLoopbackLiteral(std::string_view(a).substr(0, close + 1));
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
