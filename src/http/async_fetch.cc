// fetchAsync: see async_fetch.h.
#include "http/async_fetch.h"

#include "http/chunked.h"
#include "http/fd_tls.h"
#include "http/parser.h"

namespace kvgate::http {
namespace {

asio::awaitable<int> readFinalHeadOf(SocketOrTls& c, std::string& buf, std::string_view method,
                                     ResponseHead& rh, error_code& read_error,
                                     std::string& parse_error) {
  char tmp[4096];
  ParseError perr;
  for (;;) {  // interim 1xx heads are skipped: the final answer follows
    int hn = 0;
    while ((hn = parseResponseHead(buf.data(), buf.size(), 16384, method, rh, perr)) == 0) {
      size_t n = co_await c.readSome(tmp, sizeof tmp, read_error);
      if (read_error) co_return -1;
      if (n == 0) {
        read_error = asio::error::eof;
        co_return -1;
      }
      buf.append(tmp, n);
    }
    if (hn < 0) {
      parse_error = perr.reason;
      co_return -1;
    }
    if (rh.status >= 200) co_return hn;
    buf.erase(0, static_cast<size_t>(hn));
    rh = ResponseHead{};
  }
}

}  // namespace

asio::awaitable<int> readFinalHead(tcp::socket& sock, std::string& buf, std::string_view method,
                                   ResponseHead& rh, error_code& read_error,
                                   std::string& parse_error) {
  SocketOrTls c{sock, nullptr, nullptr};
  co_return co_await readFinalHeadOf(c, buf, method, rh, read_error, parse_error);
}

asio::awaitable<FetchResult> fetchAsync(std::string host, uint16_t port, std::string method,
                                        std::string target, std::chrono::milliseconds timeout,
                                        size_t max_body, const TlsFiles* tls,
                                        std::string tls_name) {
  FetchResult res;
  auto ex = co_await asio::this_coro::executor;
  tcp::socket sock(ex);
  Deadline d(ex);
  d.start([&sock] {
    error_code ec;
    sock.close(ec);
  });
  d.expireAfter(timeout);
  error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) {
    res.error = "not an IP address: " + host;
    co_return res;
  }
  co_await sock.async_connect(tcp::endpoint(addr, port), useEc(ec));
  if (ec) {
    res.error = d.expired() ? "connect timed out" : "connect: " + ec.message();
    co_return res;
  }
  res.connected = true;
  SocketOrTls conn{sock, nullptr, nullptr};
  if (tls) {
    ec = co_await clientHandshake(sock, *tls, tls_name, conn.ctx, conn.tls);
    if (ec) {
      res.error = d.expired() ? "TLS handshake timed out" : "TLS handshake: " + ec.message();
      co_return res;
    }
  }
  const bool v6 = host.find(':') != std::string::npos;
  const std::string req =
      method + " " + target + " HTTP/1.1\r\nHost: " + (v6 ? "[" + host + "]" : host) + ":" +
      std::to_string(port) +
      "\r\nUser-Agent: kvgate\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  ec = co_await conn.write(req);
  if (ec) {
    res.error = "send: " + ec.message();
    co_return res;
  }
  res.sent = true;
  std::string buf;
  char tmp[16384];
  ResponseHead rh;
  std::string perr;
  const int hn = co_await readFinalHeadOf(conn, buf, method, rh, ec, perr);
  if (hn < 0) {
    res.error =
        ec ? (d.expired() ? "timed out" : "read: " + ec.message()) : "bad response head: " + perr;
    co_return res;
  }
  res.status = rh.status;
  if (rh.body_kind == BodyKind::kLength && rh.content_length > max_body) {
    res.error = "answer larger than " + std::to_string(max_body) + " bytes";
    co_return res;
  }
  ChunkedScanner chunked;
  bool done = rh.body_kind == BodyKind::kNone;
  auto take = [&](const char* p, size_t n) {
    if (rh.body_kind == BodyKind::kChunked) {
      auto st = chunked.feed(p, n, &res.body);
      if (st.error) return false;
      done = st.done;
    } else {
      res.body.append(p, n);
      if (rh.body_kind == BodyKind::kLength && res.body.size() >= rh.content_length) {
        res.body.resize(rh.content_length);
        done = true;
      }
    }
    return res.body.size() <= max_body;
  };
  if (!done && !take(buf.data() + hn, buf.size() - static_cast<size_t>(hn))) {
    res.error = "bad or oversized body";
    co_return res;
  }
  while (!done) {
    size_t n = co_await conn.readSome(tmp, sizeof tmp, ec);
    if (!ec && n == 0) ec = asio::error::eof;
    if (n > 0 && !take(tmp, n)) {
      res.error = "bad or oversized body";
      co_return res;
    }
    if (ec == asio::error::eof && rh.body_kind == BodyKind::kUntilClose && !d.expired()) {
      done = true;  // the peer ended the body by closing
    } else if (ec) {
      res.error = d.expired() ? "timed out" : "read: " + ec.message();
      co_return res;
    }
  }
  d.stop();
  res.ok = true;
  co_return res;
}

}  // namespace kvgate::http
