// Who may write the hint index: the ingest RPCs (ReportCacheState, PublishEvent) of `kvgate index`.
//
// Lookups only read routing hints, but ingest changes where every client of the service routes:
// an unauthenticated writer could steer traffic onto one replica. Policy, in order:
//   - `--ingest-token-file FILE`: each ingest call must carry `authorization: Bearer <token>`
//     (gRPC metadata) matching one of the file's tokens (compared in constant time); else
//     UNAUTHENTICATED. The file follows the secret-file rules (common/secret_file.h).
//   - `--tls-client-ca FILE` (with --tls-cert): every call's TLS client must present a certificate
//     that CA signed (gRPC refuses the handshake otherwise); ingest then needs nothing more unless
//     a token file is also given.
//   Tokens must be at least kMinTokenBytes long; a token file on a plaintext listener is logged
//   as a warning (the token crosses the network in clear).
//   - neither: ingest is accepted only from loopback peers (127.0.0.0/8, ::1); others get
//     PERMISSION_DENIED, unless `--ingest-insecure` (documented as unsafe) accepts anyone.
// Refusals are counted in kvgate_index_ingest_refused_total{reason} (unauthenticated,
// not_loopback).
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::hints {

struct IngestAuth {
  static constexpr size_t kMinTokenBytes = 16;
  IngestAuth() = default;
  // A bearer token is then required; only the tokens' SHA-256 digests are kept.
  explicit IngestAuth(std::vector<std::string> tokens);
  bool client_certs = false;  // the transport verified a client certificate
  bool insecure = false;      // --ingest-insecure: anyone may write
  bool needsToken() const { return !digests_.empty(); }

  enum class Verdict { kOk, kUnauthenticated, kNotLoopback };
  // `authorization`: the call's metadata value ("" when absent); `peer`: gRPC's peer string
  // ("ipv4:127.0.0.1:5555", "ipv6:[::1]:5555", "unix:...").
  Verdict check(std::string_view authorization, std::string_view peer) const;

 private:
  std::vector<std::array<unsigned char, 32>> digests_;
};

// True for gRPC peer strings of loopback addresses and Unix sockets.
bool isLoopbackPeer(std::string_view peer);

}  // namespace kvgate::hints
