// The two halves of an HTTP/2 writer, shared by the client side (h2_conn.cc) and the engine side
// (upstream_session.cc): frame what libnghttp2 has to send, a bounded amount ahead of the socket;
// write it, through TLS or not.
#pragma once
#include <nghttp2/nghttp2.h>

#include <string>
#include <string_view>

#include "common/log.h"
#include "http/asio.h"
#include "http/fd_tls.h"

namespace kvgate::proxy::h2 {

// A header field for libnghttp2 (which copies it when the frame is submitted; `flags`:
// NGHTTP2_NV_FLAG_NO_INDEX keeps a secret out of the peer's HPACK table).
inline nghttp2_nv nv(std::string_view name, std::string_view value,
                     uint8_t flags = NGHTTP2_NV_FLAG_NONE) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          flags};
}

// Frames into `out` (cleared first) until `limit` bytes or nothing more. False: libnghttp2 failed
// (logged at debug with `who`); the caller closes the connection.
inline bool frameAhead(nghttp2_session* session, std::string& out, size_t limit, const char* who) {
  out.clear();
  while (out.size() < limit) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session, &data);
    if (n < 0) {
      log::debug("proxy", std::string("HTTP/2 send ") + who +
                              " failed: " + nghttp2_strerror(static_cast<int>(n)));
      return false;
    }
    if (n == 0) break;
    out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
  return true;
}

inline asio::awaitable<error_code> writeFrames(tcp::socket& sock, http::FdTls* tls,
                                               const std::string& out) {
  if (tls) co_return co_await tls->write(sock, out, {});
  error_code ec;
  co_await asio::async_write(sock, asio::buffer(out), useEc(ec));
  co_return ec;
}

}  // namespace kvgate::proxy::h2
