#include "http/client.h"

#include <boost/asio/ssl.hpp>

#include <memory>
#include <optional>

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

namespace {

// One exchange as a coroutine on the caller's private io_context: fetch() runs it for at most
// the timeout in all (resolve, connect, handshake, every read and write), then closes the socket.
asio::awaitable<Result<ClientResponse>> exchange(asio::io_context& io, tcp::socket& sock,
                                                 asio::ssl::stream<tcp::socket&>* tls,
                                                 std::string host, std::string port,
                                                 std::string hostport, std::string req,
                                                 std::string method, size_t max_body) {
  error_code ec;
  tcp::resolver resolver(io);
  auto eps = co_await resolver.async_resolve(host, port, useEc(ec));
  if (ec) co_return fail(503, "connect", "cannot resolve " + hostport + ": " + ec.message());
  co_await asio::async_connect(sock, eps, useEc(ec));
  if (ec) co_return fail(503, "connect", "cannot connect to " + hostport + ": " + ec.message());
  if (tls) {
    co_await tls->async_handshake(asio::ssl::stream_base::client, useEc(ec));
    if (ec) co_return fail(503, "tls", "TLS handshake with " + hostport + " failed: " + ec.message());
  }
  auto readSome = [&](char* p, size_t n) -> asio::awaitable<size_t> {
    if (tls) co_return co_await tls->async_read_some(asio::buffer(p, n), useEc(ec));
    co_return co_await sock.async_read_some(asio::buffer(p, n), useEc(ec));
  };
  if (tls) co_await asio::async_write(*tls, asio::buffer(req), useEc(ec));
  else co_await asio::async_write(sock, asio::buffer(req), useEc(ec));
  if (ec) co_return fail(503, "send", "cannot send request: " + ec.message());
  std::string buf;
  ResponseHead head;
  ParseError perr;
  int hn = 0;
  char tmp[16384];
  while ((hn = parseResponseHead(buf.data(), buf.size(), 64 * 1024, method, head, perr)) == 0) {
    const size_t n = co_await readSome(tmp, sizeof tmp);
    if (ec) co_return fail(502, "recv", "no response: " + ec.message());
    buf.append(tmp, n);
  }
  if (hn < 0) co_return fail(502, "recv", std::string("malformed response: ") + perr.reason);
  ClientResponse out;
  out.status = head.status;
  for (size_t i = 0; i < head.num_headers; ++i)
    out.headers.emplace_back(std::string(head.headers[i].name), std::string(head.headers[i].value));
  auto kind = head.body_kind;
  uint64_t cl = head.content_length;
  buf.erase(0, static_cast<size_t>(hn));
  if (kind == BodyKind::kLength && cl > max_body)
    co_return fail(413, "recv", "response larger than " + std::to_string(max_body) + " bytes");
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
      if (st.error) co_return fail(502, "recv", "malformed chunked response");
      if (st.done) break;
    }
    const size_t n = co_await readSome(tmp, sizeof tmp);
    if ((ec == asio::error::eof || ec == asio::ssl::error::stream_truncated) &&
        kind == BodyKind::kUntilClose) {
      out.body = buf;
      break;
    }
    if (ec) co_return fail(502, "recv", "truncated response: " + ec.message());
    buf.append(tmp, n);
    if (buf.size() + out.body.size() > max_body)
      co_return fail(413, "recv", "response larger than " + std::to_string(max_body) + " bytes");
  }
  co_return out;
}

bool isIpLiteral(const std::string& h) {
  error_code ec;
  asio::ip::make_address(h, ec);
  return !ec;
}

}  // namespace

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
  std::string path = base + target;
  if (path.empty()) path = "/";
  // host[:port], [v6]:port or [v6]
  std::string host = hostport, port = https ? "443" : "80";
  if (!hostport.empty() && hostport.front() == '[') {
    const size_t close = hostport.find(']');
    if (close == std::string::npos) return fail(400, "url", "malformed host in " + url);
    host = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size()) {
      if (hostport[close + 1] != ':') return fail(400, "url", "malformed host in " + url);
      port = hostport.substr(close + 2);
    }
  } else if (size_t colon = hostport.rfind(':'); colon != std::string::npos) {
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  asio::io_context io;
  error_code ec;
  // HTTPS: the server's certificate is verified against the system's CAs or setCaFile()'s, and
  // its name (or IP address) against the URL's host.
  std::unique_ptr<asio::ssl::context> ctx;
  tcp::socket sock(io);
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;
  if (https) {
    ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    if (ca.empty()) ctx->set_default_verify_paths(ec);
    else ctx->load_verify_file(ca, ec);
    if (ec) return fail(400, "cacert", "CA file " + ca + ": " + ec.message());
    ctx->set_verify_mode(asio::ssl::verify_peer);
    tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(sock, *ctx);
    tls->set_verify_callback(asio::ssl::host_name_verification(host));
    if (!isIpLiteral(host)) SSL_set_tlsext_host_name(tls->native_handle(), host.c_str());
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + hostport +
                    "\r\nConnection: close\r\nAccept: application/json\r\n";
  if (opts.send_token && !bearerToken().empty())
    req += "Authorization: Bearer " + bearerToken() + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n";
  }
  req += "\r\n" + body;
  std::optional<Result<ClientResponse>> result;
  asio::co_spawn(io,
                 exchange(io, sock, tls.get(), host, port, hostport, std::move(req), method,
                          opts.max_body_bytes),
                 [&](std::exception_ptr e, Result<ClientResponse> r) {
                   if (e) result = fail(502, "recv", "exchange failed");
                   else result = std::move(r);
                 });
  io.run_for(timeout);  // one deadline for the whole exchange
  if (!result) {
    sock.close(ec);  // (the pending operations complete, aborted)
    io.restart();
    io.run_for(std::chrono::milliseconds(100));
    return fail(504, "timeout", "no complete answer from " + hostport + " within " +
                                    std::to_string(timeout.count()) + " ms");
  }
  return std::move(*result);
}

}  // namespace kvgate::http
