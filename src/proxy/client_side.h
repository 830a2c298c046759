// The client's end of one request, as the request path (an Exchange, exchange.h) sees it: the
// connection that frames bytes for that client implements it, one per wire protocol: ClientConn
// (client_conn.h) for an HTTP/1.x connection (head text, chunk framing, interim answers, the
// disconnect watcher, keep-alive, the sockmap splice), the HTTP/2 connection's stream
// (h2/h2_conn.h) for a multiplexed one (the answer's head as fields, the payload unframed,
// resets). The request path never names a protocol: it asks its ClientSide.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "http/asio.h"
#include "sockmap/sockmap_relay.h"

namespace kvgate::proxy {

struct Request;  // (request_ctx.h)

// A response head as fields, protocol-neutral: the status, then names (lower-case) and values,
// kept back to back in one buffer reused request after request.
struct HeadFields {
  int status = 0;
  void clear() {
    status = 0;
    store_.clear();
    at_.clear();
  }
  void add(std::string_view name, std::string_view value) {
    at_.push_back(static_cast<uint32_t>(store_.size()));
    for (char c : name) store_.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
    at_.push_back(static_cast<uint32_t>(store_.size()));
    store_.append(value);
    at_.push_back(static_cast<uint32_t>(store_.size()));
  }
  size_t size() const { return at_.size() / 3; }
  std::string_view name(size_t i) const { return view(at_[3 * i], at_[3 * i + 1]); }
  std::string_view value(size_t i) const { return view(at_[3 * i + 1], at_[3 * i + 2]); }
  void release() {  // (a long stream does not keep its head's memory)
    clear();
    std::string().swap(store_);
    std::vector<uint32_t>().swap(at_);
  }

 private:
  std::string_view view(uint32_t from, uint32_t to) const {
    return std::string_view(store_).substr(from, to - from);
  }
  std::string store_;
  std::vector<uint32_t> at_;  // per field: name start, value start, value end
};

class ClientSide {
 public:
  // --- Framing of the answer
  // True: a multiplexed stream: the answer's head goes as fields (writeHead), then its payload
  // unframed. False: HTTP/1.x text the request path builds (head text, then body bytes).
  virtual bool multiplexed() const = 0;
  // The response is the payload alone (no chunk framing, no interim answers): an HTTP/1.0
  // client, or a multiplexed stream.
  virtual bool payloadOnly() const = 0;
  // The answer's head as fields (multiplexed only), before its payload. False: the stream or
  // the connection is gone, or the head cannot be sent (reset).
  virtual bool writeHead(const HeadFields&) { return false; }
  // Bytes in order (HTTP/1.x: head text, then body; multiplexed: payload after writeHead).
  // Waits while the client holds its bound of unsent bytes (it reads slowly). False: the client
  // is gone.
  virtual asio::awaitable<bool> write(std::string_view a, std::string_view b) = 0;
  // The same without a coroutine frame when the client takes it all at once (the relay's path
  // for every event): true when done (`ec` set on an error), false when the rest (from
  // `written`) is for writeRest.
  virtual bool writeNow(std::string_view, std::string_view, size_t& /*written*/,
                        error_code& /*ec*/) {
    return false;
  }
  virtual asio::awaitable<error_code> writeRest(std::string_view a, std::string_view b,
                                                size_t written) {
    const size_t in_a = std::min(written, a.size());
    const bool ok = co_await write(a.substr(in_a), b.substr(std::min(written - in_a, b.size())));
    co_return ok ? error_code() : error_code(asio::error::broken_pipe);
  }

  // --- The request's bytes
  // The body after the head (the request path's gates passed): HTTP/1.x reads it from the
  // socket (bounded: it answers 413 and 400 itself, the deadline's 408 comes through
  // requestTimedOut); a stream's came whole with its head.
  // False: the request ends here.
  virtual asio::awaitable<bool> readBody(Request&) { co_return true; }
  // The request's bytes may be freed now (a stream, once its request was sent: memory per open
  // stream): false while other bytes share their buffer (an HTTP/1.1 pipelined request).
  virtual bool requestReleasable() const = 0;
  virtual void releaseRequest() = 0;

  // --- The connection
  // The connection stays open after this answer (HTTP/1.1 keep-alive: the answer says
  // `Connection: close` otherwise); a stream's connection outlives its answers.
  virtual bool keepAlive() const { return true; }
  virtual void closeAfter() {}  // the connection closes after this answer
  virtual void setIdleTimeout(std::chrono::milliseconds) {}  // between requests (the rule's)
  // The request path gives up on the client (its deadline): the socket closes (HTTP/1.x) or the
  // stream is reset now.
  virtual void close() = 0;
  // The request path is done with the client: nothing uses it afterwards (a stream ends;
  // `complete` false: the answer was cut short and the client must not take it for whole).
  virtual void finish(bool /*complete*/) {}
  // The deadline expired while the head or the body was being read: HTTP/1.x over plain TCP
  // sends its 408 (TLS: nothing in plaintext); a stream has nothing to say.
  virtual void requestTimedOut() {}
  // Watch for the client leaving while the upstream makes the request wait (HTTP/1.x: a
  // readiness wait on the socket; a stream learns of it by a reset): Exchange::clientLeft().
  virtual void watch() {}
  virtual void unwatch() {}
  // A plain TCP client socket the kernel may splice a body into (sockmap), and its relay
  // registration; -1 / null for TLS and streams.
  virtual int plainFd() { return -1; }
  virtual sockmap::Registration* sockmapTarget() { return nullptr; }
  // The access log's `proto` field ("" for HTTP/1.x).
  virtual std::string_view protoName() const { return {}; }

 protected:
  ~ClientSide() = default;
};

}  // namespace kvgate::proxy
