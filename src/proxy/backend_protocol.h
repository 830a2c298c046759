// A rule's backend_protocol (docs/rest-api.md): HTTP/1.1, HTTP/2, or both (the engine's choice:
// ALPN over TLS, h2c with an HTTP/1.1 fallback in cleartext; learned per endpoint by each
// worker's UpstreamPool).
#pragma once
#include <cstdint>
#include <string_view>

namespace kvgate::proxy {

enum class BackendProtocol : uint8_t { kHttp1, kHttp2, kBoth };

inline BackendProtocol backendProtocolOf(std::string_view v) {
  return v == "http2" ? BackendProtocol::kHttp2
         : v == "both" ? BackendProtocol::kBoth
                       : BackendProtocol::kHttp1;
}

}  // namespace kvgate::proxy
