// The HTTP/2 <-> request path bridge: an HTTP/2 request's header list becomes the HTTP/1.1 head
// text the request path reads (the same strict parser, the same normalization as an HTTP/1.1
// client's: what is routed and authorized is what the engine receives). The answers go to the
// stream as fields (client_side.h HeadFields: an engine's filtered by
// Exchange::downstreamFields, the gateway's own built by Exchange::ownHead), not as text.
//
// Request rules (RFC 9113 §8.3, §8.2.3; libnghttp2 has already refused malformed pseudo-headers,
// upper-case names, connection-specific fields and CR/LF/NUL in values):
//   :method and :path make the request line; :authority becomes Host (a Host field that differs
//   from :authority is a 400); cookie fields are joined with "; "; the client's content-length
//   (checked against the DATA by libnghttp2) is replaced by the body's real length; `expect` and
//   `te` are dropped (no meaning once the whole body is here); CONNECT is refused (501).
//   The head text is bounded by `max_head_bytes` (431 beyond).
//
// The engine side (rules' backend_protocol http2, h2/upstream_session.h) is the mirror image: the
// HTTP/1.1 request head the request path built for the engine becomes the HTTP/2 request
// (requestFields), and the engine's response HEADERS become the HTTP/1.1 head text the request
// path reads (ResponseHeadText), so routing, relay, SSE and usage scanning read the same bytes
// whatever the engine speaks:
//   request: the request line's method and target give :method and :path, Host gives :authority
//     (an absolute-form target gives both), :scheme is the connection's (http or https); host,
//     hop-by-hop fields and `expect` are dropped, names lower-cased, content-length kept (the
//     body is whole); credentials and cookies are sent never-indexed (sensitiveField);
//   response: :status makes the status line; a body with no content-length is chunk-framed
//     (`transfer-encoding: chunked` added: ResponseHeadText::chunked()), so its end is the
//     stream's end and not a connection close; the head text is bounded (502 beyond).
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
  // The method of a request that did not come as HTTP/2 fields (stream 1 after an Upgrade).
  void presetMethod(std::string_view m) { method_.assign(m); }

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

// The HTTP/2 request for the engine from the HTTP/1.1 head text `head` (the request path's). False
// with `error` set: not a request head, or one HTTP/2 cannot carry (no Host).
bool requestFields(std::string_view head, std::string_view scheme, std::vector<Field>& fields,
                   std::string& error);
// The value of an HTTP2-Settings field (RFC 7540 §3.2.1: a SETTINGS payload in base64url, no
// padding) decoded into `out`. False: not base64url, not whole 6-byte entries, more than 32, or a
// value HTTP/2 forbids (ENABLE_PUSH above 1, a window past 2^31-1, a frame size out of range).
bool decodeHttp2Settings(std::string_view value, std::string& out);

// Fields whose values HPACK must never index on a connection that carries many clients' requests
// (a compression side channel, RFC 7541 §7.1.3): credentials and cookies.
bool sensitiveField(std::string_view lower_name);

// One response HEADERS block from the engine, as HTTP/1.1 head text.
class ResponseHeadText {
 public:
  explicit ResponseHeadText(size_t max_head_bytes) : max_bytes_(max_head_bytes) {}
  // One field as libnghttp2 delivered it (it has checked names, values and pseudo-headers).
  void add(std::string_view name, std::string_view value);
  // The head text for a request of `request_method`, appended to `out`. False: too large, or no
  // :status.
  bool finish(std::string_view request_method, std::string& out);
  int status() const { return status_; }
  bool interim() const { return status_ >= 100 && status_ < 200; }
  // The body that follows is to be chunk-framed (no content-length, and a body is allowed).
  bool chunked() const { return chunked_; }
  void clear();

 private:
  size_t max_bytes_;
  int status_ = 0;
  bool has_length_ = false, too_large_ = false, chunked_ = false;
  std::string fields_;
};

}  // namespace kvgate::proxy::h2
