#include "hints/ingest_auth.h"

#include <openssl/crypto.h>

namespace kvgate::hints {

bool isLoopbackPeer(std::string_view peer) {
  if (peer.starts_with("unix:")) return true;
  if (peer.starts_with("ipv4:127.")) return true;
  if (peer.starts_with("ipv6:[::1]:")) return true;
  // An IPv4 client on a dual-stack listener: ::ffff:127.x.y.z (gRPC may print it either way).
  if (peer.starts_with("ipv6:[::ffff:127.")) return true;
  return false;
}

IngestAuth::Verdict IngestAuth::check(std::string_view authorization, std::string_view peer) const {
  if (!tokens.empty()) {
    static constexpr std::string_view kBearer = "Bearer ";
    if (authorization.size() <= kBearer.size() ||
        authorization.substr(0, kBearer.size()) != kBearer)
      return Verdict::kUnauthenticated;
    const std::string_view got = authorization.substr(kBearer.size());
    bool ok = false;
    for (const auto& t : tokens)  // (every token compared: the time says nothing of which)
      ok |= t.size() == got.size() && CRYPTO_memcmp(t.data(), got.data(), t.size()) == 0;
    return ok ? Verdict::kOk : Verdict::kUnauthenticated;
  }
  if (client_certs || insecure) return Verdict::kOk;
  return isLoopbackPeer(peer) ? Verdict::kOk : Verdict::kNotLoopback;
}

}  // namespace kvgate::hints
