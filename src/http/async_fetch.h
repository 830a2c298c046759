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

namespace kvgate::http {

struct FetchResult {
  bool connected = false;  // the TCP connection was made
  bool sent = false;       // the request was written (the peer may have acted on it)
  bool ok = false;         // a complete answer was read (any status)
  int status = 0;
  std::string body;
  std::string error;  // why not ok
};

asio::awaitable<FetchResult> fetchAsync(std::string host, uint16_t port, std::string method,
                                        std::string target, std::chrono::milliseconds timeout,
                                        size_t max_body);

}  // namespace kvgate::http
