// The client side of one request of a multiplexed connection (an HTTP/2 stream), as the request
// path sees it: every answer, an engine's or the gateway's own, goes as a head of fields
// (HeadFields: no text to read back) then payload bytes, as to an HTTP/1.1 client that asked with
// HTTP/1.0 framing (no chunk framing, no interim answers). It says when it is done. The
// connection (h2/h2_conn.h) frames it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "http/asio.h"

namespace kvgate::proxy {

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

class StreamSink {
 public:
  // Payload bytes, after writeHead. Waits while the stream holds its bound of unsent bytes (the
  // client reads slowly). False: the stream or the connection is gone (or no head was sent: the
  // stream is reset).
  virtual asio::awaitable<bool> write(std::string_view a, std::string_view b) = 0;
  // The answer's head, before its payload. False: the stream or the connection is gone, or the
  // head cannot be sent (reset).
  virtual bool writeHead(const HeadFields& h) = 0;
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
