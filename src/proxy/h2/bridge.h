// The HTTP/2 <-> request path bridge: an HTTP/2 request's header list becomes the HTTP/1.1 head
// text the request path reads (the same strict parser, the same normalization as an HTTP/1.1
// client's: what is routed and authorized is what the engine receives), and the response head
// text the request path writes becomes an HTTP/2 status and header list.
//
// Request rules (RFC 9113 §8.3, §8.2.3; libnghttp2 has already refused malformed pseudo-headers,
// upper-case names, connection-specific fields and CR/LF/NUL in values):
//   :method and :path make the request line; :authority becomes Host (a Host field that differs
//   from :authority is a 400); cookie fields are joined with "; "; the client's content-length
//   (checked against the DATA by libnghttp2) is replaced by the body's real length; `expect` and
//   `te` are dropped (no meaning once the whole body is here); CONNECT is refused (501).
//   The head text is bounded by `max_head_bytes` (431 beyond).
// Response rules: the status line's code becomes :status; hop-by-hop fields (RFC 9110 §7.6.1)
//   are dropped; names are lower-cased.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::proxy::h2 {

class RequestHeadBuilder {
 public:
  explicit RequestHeadBuilder(size_t max_head_bytes) : max_bytes_(max_head_bytes) {}
  // One field as libnghttp2 delivered it. After an error, further fields are ignored.
  void add(std::string_view name, std::string_view value);
  // The HTTP/1.1 head text for a body of `body_len` bytes into `out`. False: `status()` and
  // `error()` say why (400, 431, 501).
  bool finish(size_t body_len, std::string& out);
  int status() const { return status_; }
  const std::string& error() const { return error_; }
  std::string_view method() const { return method_; }

 private:
  void fail(int status, std::string why);
  size_t max_bytes_;
  size_t bytes_ = 0;
  std::string method_, path_, authority_, host_, cookie_;
  bool has_host_ = false;
  std::string fields_;  // "name: value\r\n" lines
  int status_ = 0;
  std::string error_;
};

struct Field {
  std::string name;  // lower-case
  std::string value;
};

// `head`: an HTTP/1.x response head, status line to the empty line. False: not one.
bool responseFields(std::string_view head, std::string_view request_method, int& status,
                    std::vector<Field>& fields);

}  // namespace kvgate::proxy::h2
