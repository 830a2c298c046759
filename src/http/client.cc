#include "http/client.h"

#include <boost/asio/ssl.hpp>

#include <memory>

#include "http/asio.h"
#include "http/chunked.h"
#include "http/parser.h"

namespace kvgate::http {

namespace {
std::string& bearerToken() {
  static std::string t;
  return t;
}
std::string& caFile() {
  static std::string f;
  return f;
}
}  // namespace

void setBearerToken(std::string token) { bearerToken() = std::move(token); }
void setCaFile(std::string path) { caFile() = std::move(path); }

Result<ClientResponse> fetch(const std::string& url, const std::string& method,
                             const std::string& target, const std::string& body,
                             const std::string& content_type, std::chrono::milliseconds timeout,
                             const FetchOptions& opts) {
  const std::string& ca = opts.ca_file.empty() ? caFile() : opts.ca_file;
  std::string_view u = url;
  const bool https = u.starts_with("https://");
  if (!https && !u.starts_with("http://"))
    return fail(400, "url", "only http:// and https:// URLs are supported: " + url);
  u.remove_prefix(https ? 8 : 7);
  size_t slash = u.find('/');
  std::string hostport(u.substr(0, slash));
  std::string base = slash == std::string_view::npos ? "" : std::string(u.substr(slash));
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::string host = hostport, port = https ? "443" : "80";
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
  // HTTPS: the server's certificate is verified against the system's CAs or setCaFile()'s, and
  // its name against the URL's host.
  std::unique_ptr<asio::ssl::context> ctx;
  std::unique_ptr<asio::ssl::stream<tcp::socket>> tls;
  tcp::socket plain(io);
  if (https) {
    ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    if (ca.empty()) ctx->set_default_verify_paths(ec);
    else ctx->load_verify_file(ca, ec);
    if (ec) return fail(400, "cacert", "CA file " + ca + ": " + ec.message());
    ctx->set_verify_mode(asio::ssl::verify_peer);
    tls = std::make_unique<asio::ssl::stream<tcp::socket>>(io, *ctx);
    std::string name = host;
    if (name.size() > 1 && name.front() == '[') name = name.substr(1, name.size() - 2);
    tls->set_verify_callback(asio::ssl::host_name_verification(name));
    SSL_set_tlsext_host_name(tls->native_handle(), name.c_str());
  }
  tcp::socket& sock = tls ? tls->next_layer() : plain;
  asio::connect(sock, eps, ec);
  if (ec) return fail(503, "connect", "cannot connect to " + hostport + ": " + ec.message());
  struct timeval tv {};
  tv.tv_sec = static_cast<long>(timeout.count() / 1000);
  tv.tv_usec = static_cast<long>((timeout.count() % 1000) * 1000);
  ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (tls) {
    tls->handshake(asio::ssl::stream_base::client, ec);
    if (ec) return fail(503, "tls", "TLS handshake with " + hostport + " failed: " + ec.message());
  }
  auto readSome = [&](char* p, size_t n) -> size_t {
    return tls ? tls->read_some(asio::buffer(p, n), ec) : plain.read_some(asio::buffer(p, n), ec);
  };
  std::string req = method + " " + base + target + " HTTP/1.1\r\nHost: " + hostport +
                    "\r\nConnection: close\r\nAccept: application/json\r\n";
  if (opts.send_token && !bearerToken().empty())
    req += "Authorization: Bearer " + bearerToken() + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n";
  }
  req += "\r\n" + body;
  if (tls) asio::write(*tls, asio::buffer(req), ec);
  else asio::write(plain, asio::buffer(req), ec);
  if (ec) return fail(503, "send", "cannot send request: " + ec.message());
  std::string buf;
  ResponseHead head;
  ParseError perr;
  int hn = 0;
  char tmp[16384];
  while ((hn = parseResponseHead(buf.data(), buf.size(), 64 * 1024, method, head, perr)) == 0) {
    size_t n = readSome(tmp, sizeof tmp);
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
    if (kind == BodyKind::kLength && cl > opts.max_body_bytes)
      return fail(413, "recv", "response larger than " + std::to_string(opts.max_body_bytes) + " bytes");
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
    size_t n = readSome(tmp, sizeof tmp);
    if ((ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) &&
        kind == BodyKind::kUntilClose) {
      out.body = buf;
      break;
    }
    if (ec) return fail(502, "recv", "truncated response: " + ec.message());
    buf.append(tmp, n);
    if (buf.size() + out.body.size() > opts.max_body_bytes)
      return fail(413, "recv", "response larger than " + std::to_string(opts.max_body_bytes) + " bytes");
  }
  return out;
}

}  // namespace kvgate::http
