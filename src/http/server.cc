#include "http/server.h"

#include <set>

#include "common/percent.h"
#include "common/json_escape.h"
#include "common/log.h"
#include "http/chunked.h"
#include "http/parser.h"
#include "http/tls.h"

namespace kvgate::http {

// Server state is touched only from the io_context's thread (one thread per Server).
struct Server::State {
  Handler handler;
  ServerOptions opts;
  std::vector<std::shared_ptr<tcp::acceptor>> acceptors;
  std::set<tcp::socket*> connections;
  bool stopped = false;
  std::shared_ptr<TlsFiles> tls;
};

std::string Request::header(std::string_view name) const {
  for (auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

std::optional<std::string> Request::queryParam(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view item = q.substr(0, amp);
    size_t eq = item.find('=');
    std::string key = percentDecode(item.substr(0, eq), true);
    if (key == name)
      return eq == std::string_view::npos ? std::string() : percentDecode(item.substr(eq + 1), true);
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

const char* statusReason(int s) {
  switch (s) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 412:
      return "Precondition Failed";
    case 413:
      return "Content Too Large";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    case 507:
      return "Insufficient Storage";
    default:
      return "Unknown";
  }
}

std::string jsonEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  appendJsonEscaped(out, s);
  return out;
}

std::string jsonError(int status, std::string_view message) {
  const char* type = status >= 500 ? "server_error" : "invalid_request_error";
  std::string b = "{\"error\":{\"message\":\"";
  b += jsonEscape(message);
  b += "\",\"type\":\"";
  b += type;
  b += "\",\"param\":null,\"code\":";
  b += std::to_string(status);
  b += "}}";
  return b;
}

asio::awaitable<bool> ResponseWriter::write(std::string_view data) {
  if (failed_) co_return false;
  error_code ec;
  co_await s_.write(data, ec);
  if (ec) failed_ = true;
  co_return !ec;
}

tcp::socket& ResponseWriter::socket() { return s_.socket(); }

void Server::setTls(std::shared_ptr<TlsFiles> tls) { state_->tls = std::move(tls); }

asio::awaitable<bool> ResponseWriter::writeRaw(std::string_view data) {
  started_ = true;
  co_return co_await write(data);
}

static std::string headLine(int status, std::string_view ct, const HeaderList& extra,
                            bool keep_alive) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + statusReason(status) + "\r\n";
  if (!ct.empty()) h.append("Content-Type: ").append(ct).append("\r\n");
  for (auto& [k, v] : extra) h.append(k).append(": ").append(v).append("\r\n");
  if (!keep_alive) h.append("Connection: close\r\n");
  return h;
}

asio::awaitable<bool> ResponseWriter::send(int status, std::string_view ct, std::string_view body,
                                           HeaderList extra) {
  started_ = true;
  std::string h = headLine(status, ct, extra, keep_alive_);
  h.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n\r\n");
  if (body.size() < 64 * 1024) {
    h.append(body);
    co_return co_await write(h);
  }
  if (!co_await write(h)) co_return false;
  co_return co_await write(body);
}

asio::awaitable<bool> ResponseWriter::beginStream(int status, std::string_view ct,
                                                  HeaderList extra) {
  started_ = true;
  std::string h = headLine(status, ct, extra, keep_alive_);
  h.append("Transfer-Encoding: chunked\r\n\r\n");
  co_return co_await write(h);
}

asio::awaitable<bool> ResponseWriter::writeChunk(std::string_view data) {
  if (data.empty()) co_return !failed_;
  char size[24];
  int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string buf;
  buf.reserve(static_cast<size_t>(n) + data.size() + 2);
  buf.append(size, static_cast<size_t>(n)).append(data).append("\r\n");
  co_return co_await write(buf);
}

asio::awaitable<bool> ResponseWriter::endStream() { co_return co_await write("0\r\n\r\n"); }

Server::Server(asio::io_context& io, Handler handler, ServerOptions opts)
    : io_(io), state_(std::make_shared<State>()) {
  state_->handler = std::move(handler);
  state_->opts = opts;
}

Server::~Server() { stop(); }

Result<uint16_t> Server::listen(const std::string& host, uint16_t port) {
  error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return fail(400, "listen", "invalid listen address '" + host + "'");
  auto acc = std::make_shared<tcp::acceptor>(io_);
  tcp::endpoint ep(addr, port);
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(1024, ec);
  if (ec)
    return fail(503, "listen",
                "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  port_ = acc->local_endpoint().port();
  host_ = host;
  state_->acceptors.push_back(acc);
  asio::co_spawn(io_, acceptLoop(acc), asio::detached);
  return port_;
}

void Server::pauseAccepting() {
  for (auto& a : state_->acceptors) {
    error_code ec;
    a->close(ec);
  }
  state_->acceptors.clear();
}

Result<void> Server::resumeAccepting() {
  if (!state_->acceptors.empty() || host_.empty()) return {};
  auto r = listen(host_, port_);
  if (!r) return tl::unexpected(r.error());
  return {};
}

void Server::stop() {
  if (!state_) return;
  state_->stopped = true;
  pauseAccepting();
  for (auto* s : state_->connections) {
    error_code ec;
    s->close(ec);
  }
}

asio::awaitable<void> Server::acceptLoop(std::shared_ptr<tcp::acceptor> acc) {
  auto state = state_;
  while (acc->is_open()) {
    error_code ec;
    tcp::socket sock = co_await acc->async_accept(useEc(ec));
    if (ec) {
      if (!acc->is_open() || ec == asio::error::operation_aborted) break;
      if (acceptStarved(ec)) {  // (out of descriptors or memory: pause, do not spin)
        asio::steady_timer pause(io_, std::chrono::milliseconds(100));
        co_await pause.async_wait(useEc(ec));
      }
      continue;  // transient (EMFILE, ECONNABORTED): keep accepting
    }
    if (state->stopped) break;
    sock.set_option(tcp::no_delay(true), ec);
    asio::co_spawn(io_, serveConnection(std::move(sock)), asio::detached);
  }
}

asio::awaitable<void> Server::serveConnection(tcp::socket raw) {
  auto state = state_;
  Stream stream(std::move(raw));
  if (state->tls) stream.useTls(state->tls->current());
  tcp::socket& sock = stream.socket();
  state->connections.insert(&sock);
  Deadline deadline(sock.get_executor());
  deadline.start([&sock] {
    error_code ec;
    sock.close(ec);
  });
  if (stream.tls()) {  // the handshake within the header timeout
    deadline.expireAfter(state->opts.header_timeout);
    error_code ec;
    co_await stream.handshake(ec);
    if (ec) {
      log::debug("http", "TLS handshake failed: " + ec.message());
      deadline.stop();
      error_code e;
      sock.close(e);
      state->connections.erase(&sock);
      co_return;
    }
  }
  std::string buf;
  buf.reserve(8192);
  std::string remote;
  {
    error_code ec;
    auto ep = sock.remote_endpoint(ec);
    if (!ec) remote = ep.address().to_string();
  }
  const auto& opts = state->opts;
  bool keep_going = true;
  while (keep_going && sock.is_open()) {
    // --- head
    deadline.expireAfter(buf.empty() ? opts.idle_timeout : opts.header_timeout);
    RequestHead head;
    ParseError perr;
    int hn = 0;
    bool first_byte = !buf.empty();
    for (;;) {
      hn = parseRequestHead(buf.data(), buf.size(), opts.max_head_bytes, head, perr);
      if (hn != 0) break;
      char tmp[8192];
      error_code ec;
      size_t n = co_await stream.readSome(tmp, sizeof tmp, ec);
      if (ec || n == 0) {
        if (deadline.expired() && first_byte && sock.is_open()) {
          ResponseWriter w(stream, false);
          co_await w.send(408, "application/json", jsonError(408, "request header timeout"));
        }
        keep_going = false;
        break;
      }
      if (!first_byte) {
        first_byte = true;
        deadline.expireAfter(opts.header_timeout);
      }
      buf.append(tmp, n);
    }
    if (!keep_going) break;
    if (deadline.expired()) {
      // The socket was closed by the deadline while reading: a 408 can't be sent any more.
      break;
    }
    ResponseWriter w(stream, head.keep_alive);
    if (hn < 0) {
      w.closeAfterResponse();
      co_await w.send(perr.status, "application/json", jsonError(perr.status, perr.reason));
      break;
    }
    Request req;
    req.method = std::string(head.method);
    req.target = std::string(head.target);
    req.version_minor = head.version_minor;
    req.remote_ip = remote;
    size_t q = req.target.find('?');
    req.path = req.target.substr(0, q);
    if (q != std::string::npos) req.query = req.target.substr(q + 1);
    for (size_t i = 0; i < head.num_headers; ++i)
      req.headers.emplace_back(std::string(head.headers[i].name),
                               std::string(head.headers[i].value));
    buf.erase(0, static_cast<size_t>(hn));
    // --- body
    if (head.body_kind == BodyKind::kLength && head.content_length > opts.max_body_bytes) {
      w.closeAfterResponse();
      co_await w.send(413, "application/json", jsonError(413, "request body too large"));
      break;
    }
    if (head.expect_continue && head.body_kind != BodyKind::kNone) {
      co_await w.writeRaw("HTTP/1.1 100 Continue\r\n\r\n");
    }
    bool body_ok = true;
    if (head.body_kind == BodyKind::kLength) {
      while (buf.size() < head.content_length) {
        char tmp[16384];
        error_code ec;
        size_t n = co_await stream.readSome(tmp, sizeof tmp, ec);
        if (ec || n == 0) {
          body_ok = false;
          break;
        }
        buf.append(tmp, n);
      }
      if (body_ok) {
        req.body = buf.substr(0, head.content_length);
        buf.erase(0, head.content_length);
      }
    } else if (head.body_kind == BodyKind::kChunked) {
      ChunkedScanner sc;
      for (;;) {
        auto step = sc.feed(buf.data(), buf.size(), &req.body);
        buf.erase(0, step.consumed);
        if (step.error) {
          w.closeAfterResponse();
          co_await w.send(400, "application/json", jsonError(400, "malformed chunked body"));
          body_ok = false;
          break;
        }
        if (req.body.size() > opts.max_body_bytes) {
          w.closeAfterResponse();
          co_await w.send(413, "application/json", jsonError(413, "request body too large"));
          body_ok = false;
          break;
        }
        if (step.done) break;
        char tmp[16384];
        error_code ec;
        size_t n = co_await stream.readSome(tmp, sizeof tmp, ec);
        if (ec || n == 0) {
          body_ok = false;
          break;
        }
        buf.append(tmp, n);
      }
    }
    if (!body_ok) break;
    deadline.clear();
    bool handler_failed = false;
    try {
      co_await state->handler(req, w);
    } catch (const std::exception& e) {
      log::error("http", std::string("handler failed: ") + e.what());
      handler_failed = true;
    }
    if (handler_failed && !w.sent())
      co_await w.send(500, "application/json", jsonError(500, "internal error"));
    if (!w.sent()) {
      co_await w.send(500, "application/json", jsonError(500, "handler produced no response"));
    }
    keep_going = w.keepAlive() && !w.failed() && sock.is_open();
  }
  deadline.stop();
  if (sock.is_open()) co_await lingeringClose(sock);
  state->connections.erase(&sock);
}

}  // namespace kvgate::http
