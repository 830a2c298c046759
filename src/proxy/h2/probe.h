// HTTP/2 health probes (rules' backend_protocol http2 or both, probetype http or https): one
// request `method path` on a connection of its own (h2c by prior knowledge, or h2 negotiated by
// ALPN), until the response head's :status. Bounds: 64 KiB read before the status; the caller's
// deadline closes the socket (probeTimeout).
#pragma once
#include <string>

#include "http/asio.h"
#include "http/fd_tls.h"

namespace kvgate::proxy::h2 {

struct ProbeAnswer {
  int status = 0;           // the final :status (0: none came)
  bool spoke_http1 = false;  // the engine answered the preface in HTTP/1.1 (it speaks only that)
};

asio::awaitable<ProbeAnswer> probeStatus(http::SocketOrTls& conn, const std::string& method,
                                         const std::string& path, const std::string& authority,
                                         bool tls);

}  // namespace kvgate::proxy::h2
