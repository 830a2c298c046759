#include "http/client.h"

#include "http/asio.h"
#include "http/chunked.h"
#include "http/parser.h"

namespace kvgate::http {

namespace {
std::string& bearerToken() {
  static std::string t;
  return t;
}
}  // namespace

void setBearerToken(std::string token) { bearerToken() = std::move(token); }

Result<ClientResponse> fetch(const std::string& url, const std::string& method,
                             const std::string& target, const std::string& body,
                             const std::string& content_type, std::chrono::milliseconds timeout) {
  std::string_view u = url;
  if (!u.starts_with("http://")) return fail(400, "url", "only http:// URLs are supported: " + url);
  u.remove_prefix(7);
  size_t slash = u.find('/');
  std::string hostport(u.substr(0, slash));
  std::string base = slash == std::string_view::npos ? "" : std::string(u.substr(slash));
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string host = hostport, port = "80";
  size_t colon = hostport.rfind(':');
  if (colon != std::string::npos && hostport.find(']') == std::string::npos) {
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  asio::io_context io;
  tcp::resolver resolver(io);
  error_code ec;
  auto eps = resolver.resolve(host, port, ec);
  if (ec) return fail(503, "connect", "cannot resolve " + hostport + ": " + ec.message());
  tcp::socket sock(io);
  asio::connect(sock, eps, ec);
  if (ec) return fail(503, "connect", "cannot connect to " + hostport + ": " + ec.message());
  struct timeval tv {};
  tv.tv_sec = static_cast<long>(timeout.count() / 1000);
  tv.tv_usec = static_cast<long>((timeout.count() % 1000) * 1000);
  ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string req = method + " " + base + target + " HTTP/1.1\r\nHost: " + hostport +
                    "\r\nConnection: close\r\nAccept: application/json\r\n";
  if (!bearerToken().empty()) req += "Authorization: Bearer " + bearerToken() + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n";
  }
  req += "\r\n" + body;
  asio::write(sock, asio::buffer(req), ec);
  if (ec) return fail(503, "send", "cannot send request: " + ec.message());
  std::string buf;
  ResponseHead head;
  ParseError perr;
  int hn = 0;
  char tmp[16384];
  while ((hn = parseResponseHead(buf.data(), buf.size(), 64 * 1024, method, head, perr)) == 0) {
    size_t n = sock.read_some(asio::buffer(tmp), ec);
    if (ec) return fail(502, "recv", "no response: " + ec.message());
    buf.append(tmp, n);
  }
  if (hn < 0) return fail(502, "recv", std::string("malformed response: ") + perr.reason);
  ClientResponse out;
  out.status = head.status;
  for (size_t i = 0; i < head.num_headers; ++i)
    out.headers.emplace_back(std::string(head.headers[i].name), std::string(head.headers[i].value));
  auto kind = head.body_kind;
  uint64_t cl = head.content_length;
  buf.erase(0, static_cast<size_t>(hn));
  ChunkedScanner sc;
  for (;;) {
    if (kind == BodyKind::kNone) break;
    if (kind == BodyKind::kLength && buf.size() >= cl) {
      out.body = buf.substr(0, cl);
      break;
    }
    if (kind == BodyKind::kChunked) {
      auto st = sc.feed(buf.data(), buf.size(), &out.body);
      buf.erase(0, st.consumed);
      if (st.error) return fail(502, "recv", "malformed chunked response");
      if (st.done) break;
    }
    size_t n = sock.read_some(asio::buffer(tmp), ec);
    if (ec == asio::error::eof && kind == BodyKind::kUntilClose) {
      out.body = buf;
      break;
    }
    if (ec) return fail(502, "recv", "truncated response: " + ec.message());
    buf.append(tmp, n);
  }
  return out;
}

}  // namespace kvgate::http
