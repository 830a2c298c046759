// The client side of one request of a multiplexed connection (an HTTP/2 stream), as the request
// path sees it: it writes its response as it does to an HTTP/1.1 client that asked with
// HTTP/1.0 framing (the head text, then the payload, no chunk framing, no interim answers) and
// says when it is done. The connection (h2/h2_conn.h) frames it.
#pragma once
#include <string_view>

#include "http/asio.h"

namespace kvgate::proxy {

class StreamSink {
 public:
  // Head text first (complete or in pieces), then payload bytes. Waits while the stream holds
  // its bound of unsent bytes (the client reads slowly). False: the stream or the connection is
  // gone.
  virtual asio::awaitable<bool> write(std::string_view a, std::string_view b) = 0;
  // The request path is done with the stream; nothing may use the sink afterwards. `complete`
  // false: the response was cut short (the client must not take it for whole).
  virtual void finish(bool complete) = 0;
  // The request path gives up on the client (its deadline): the stream is reset now.
  virtual void abort() = 0;
  // The request path no longer holds the request's bytes (a stream, once its request was sent).
  virtual void requestReleased() = 0;

 protected:
  ~StreamSink() = default;
};

}  // namespace kvgate::proxy
