// One HTTP/1.1 exchange from a coroutine, bounded in time and bytes: for the gateway's own calls
// to engines (the /metrics scraper, TensorRT-LLM's KV-event drain). `Connection: close`; the
// whole exchange (connect, send, read) must finish within `timeout` (the socket is closed at the
// deadline); the answer's body is read as Content-Length, chunked or until close, at most
// `max_body` bytes (more is a failure, not a truncation). An until-close body counts only when
// the peer closed cleanly (EOF), never when the deadline cut it.
#pragma once
#include <chrono>
#include <string>

#include "http/asio.h"
#include "http/parser.h"
#include "http/tls.h"

namespace kvgate::http {

struct FetchResult {
  bool connected = false;  // the TCP connection was made
  bool sent = false;       // the request was written (the peer may have acted on it)
  bool ok = false;         // a complete answer was read (any status)
  int status = 0;
  std::string body;
  std::string error;  // why not ok
};

// Reads from `sock` into `buf` until a final (>= 200) response head is complete, skipping interim
// 1xx heads. Returns the final head's size in `buf` (> 0, `rh` filled), or -1: `read_error` set
// when reading failed (EOF, reset, a deadline closing the socket), else `parse_error` names what
// was wrong with the head (at most 16 KiB).
asio::awaitable<int> readFinalHead(tcp::socket& sock, std::string& buf, std::string_view method,
                                   ResponseHead& rh, error_code& read_error,
                                   std::string& parse_error);

// `tls` (may be null: plain HTTP): the exchange runs over TLS with this client context, checked
// for `tls_name` when the context verifies (TLS to engines, security 2).
asio::awaitable<FetchResult> fetchAsync(std::string host, uint16_t port, std::string method,
                                        std::string target, std::chrono::milliseconds timeout,
                                        size_t max_body, const TlsFiles* tls = nullptr,
                                        std::string tls_name = {});

}  // namespace kvgate::http
