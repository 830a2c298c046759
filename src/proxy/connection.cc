// The request loop of one HTTP/1.x client connection of the mode-4 fullproxy (client_conn.h).
//
// Per request: read the head (bounded, strict framing, header timeout) -> the exchange's gates
// (exchange.cc) -> read the body (Content-Length or chunked, bounded by --max-body-bytes,
// trailers bounded in total) -> dispatch (dispatch.cc: request facts, model pool, the gateway's
// own answers) -> forward (forward.cc: routing pipeline, upstream legs) -> relay (relay.cc). One
// Deadline (the exchange's) bounds every phase. On shutdown (drain) a connection idle between
// requests closes at once; one with a request in flight closes after answering it.
#include <sys/socket.h>

#include <cstring>

#include "common/ids.h"
#include "common/log.h"
#include "http/chunked.h"
#include "http/tls.h"
#include "proxy/api_facts.h"
#include "proxy/client_conn.h"
#include "proxy/facts_parser.h"
#include "proxy/h2/bridge.h"
#include "proxy/h2/h2_conn.h"

namespace kvgate::proxy {

ClientConn::ClientConn(Worker& w, std::shared_ptr<Listener> l, tcp::socket s)
    : w_(w),
      l_(std::move(l)),
      client_(std::move(s)),
      ex_(std::make_shared<Exchange>(w, l_, static_cast<ClientSide&>(*this))) {}

// (the exchange may outlive the connection: a P/D prefill drain; it writes to nobody then)
ClientConn::~ClientConn() { ex_->detachClient(); }

// >0: a complete head of that many bytes is in in_; 0: the connection closed or timed out;
// <0: a malformed head was answered (the connection must close).
asio::awaitable<int> ClientConn::readHead(http::RequestHead& head) {
  const auto& opts = w_.opts;
  if (!pipelined_.empty()) {
    in_.append(pipelined_.data(), pipelined_.size());
    pipelined_.clear();
    if (pipelined_.capacity() > kReadChunk) std::string().swap(pipelined_);
  }
  Exchange& ex = *ex_;
  ex.setPhase(in_.empty() ? Phase::kIdle : Phase::kHead);
  ex.deadline().expireAfter(in_.empty() ? idle_timeout_ : opts.header_timeout);
  http::ParseError perr;
  int hn;
  // The first bytes of a plain connection may be HTTP/2's preface (h2c by prior knowledge).
  bool maybe_h2 = ex.requestSeq() == 0 && !tls_ && w_.opts.http2;
  for (;;) {
    bool need_more = false;
    if (maybe_h2) {
      const size_t n = std::min(in_.size(), kH2Preface.size());
      if (n > 0 && std::string_view(in_.data(), n) == kH2Preface.substr(0, n)) {
        if (n == kH2Preface.size()) co_return kH2PrefaceSeen;
        need_more = true;
      } else if (n > 0) {
        maybe_h2 = false;
      }
    }
    if (!need_more) {
      hn = http::parseRequestHead(in_.data(), in_.size(), opts.max_head_bytes, head, perr);
      if (hn != 0) break;
    }
    bool was_empty = in_.empty();
    if (!co_await readMore(in_)) co_return 0;
    if (was_empty) {
      ex.setPhase(Phase::kHead);
      ex.deadline().expireAfter(opts.header_timeout);
    }
  }
  ex.begin();  // a new request: nothing of the last one is left
  if (hn < 0) {
    co_await ex.refuseHead(perr);
    co_return -1;
  }
  co_return hn;
}

// The payload is copied out as it is scanned and the scanned framing is dropped from in_ at once,
// so the raw bytes held never exceed one read: a body of tiny chunks, or of chunk-size lines full
// of extensions, costs no more memory than its payload (bounded by --max-body-bytes).
asio::awaitable<bool> ClientConn::readChunkedBody(Request& req) {
  http::ChunkedScanner sc;
  dechunked_.clear();
  for (;;) {
    auto st = sc.feed(in_.data() + req.head_bytes, in_.size() - req.head_bytes, &dechunked_);
    in_.erase(req.head_bytes, st.consumed);
    if (st.error) {
      co_await ex_->sendError(400, "bad_request", "malformed chunked request body", {}, true);
      co_return false;
    }
    if (dechunked_.size() > w_.opts.max_body_bytes) {
      co_await ex_->sendError(413, "request_too_large", "request body too large", {}, true);
      co_return false;
    }
    if (st.done) break;
    if (!co_await readMore(in_)) co_return false;
  }
  req.raw_body_bytes = 0;                                 // already dropped from in_
  dechunked_.reserve(dechunked_.size() + kFactsPadding);  // the facts parser reads in place
  req.body = dechunked_;
  req.body_capacity = dechunked_.capacity();
  co_return true;
}

// The head's views point into in_; reading the body may have moved the buffer.
void ClientConn::reparseHeadIfMoved(Request& req, const char* head_base) {
  if (in_.data() == head_base) return;
  http::ParseError perr;
  http::parseRequestHead(in_.data(), in_.size(), w_.opts.max_head_bytes, req.head, perr);
}

asio::awaitable<bool> ClientConn::readBody(Request& req) {
  const auto& head = req.head;
  ex_->setPhase(Phase::kBody);
  const char* head_base = in_.data();
  if (head.body_kind == http::BodyKind::kLength && head.content_length > w_.opts.max_body_bytes) {
    co_await ex_->sendError(413, "request_too_large", "request body too large", {}, true);
    co_return false;
  }
  if (head.expect_continue && head.body_kind != http::BodyKind::kNone &&
      in_.size() == req.head_bytes) {
    if (!co_await write("HTTP/1.1 100 Continue\r\n\r\n", {})) co_return false;
  }
  if (head.body_kind == http::BodyKind::kChunked) {
    if (!co_await readChunkedBody(req)) co_return false;
    reparseHeadIfMoved(req, head_base);
  } else {
    size_t len = head.body_kind == http::BodyKind::kLength ? head.content_length : 0;
    while (in_.size() < req.head_bytes + len)
      if (!co_await readMore(in_)) co_return false;
    reparseHeadIfMoved(req, head_base);
    req.raw_body_bytes = len;
    req.body = std::string_view(in_.data() + req.head_bytes, len);
    req.body_capacity = in_.readableFrom(req.body.data());
  }
  ex_->deadline().clear();
  request_bytes_ = req.head_bytes + req.raw_body_bytes;
  co_return true;
}

void ClientConn::onDrain() {
  if (h2_) {  // an HTTP/2 connection: GOAWAY, its streams finish
    h2_->drain();
    return;
  }
  if (ex_->phase() != Phase::kIdle)
    return;  // a request in progress is answered, then the conn closes
  // Idle between requests: close now, unless request bytes already wait in the kernel (a
  // connection accepted just before the drain): those are read and answered first.
  char c;
  ssize_t n = ::recv(client_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n <= 0) close();
}

asio::awaitable<void> ClientConn::run() {
  auto self = shared_from_this();
  ex_->startDeadline();
  // Counted and registered for draining until the socket is closed, on every path.
  struct Registration {
    Worker& w;
    ClientConn* c;
    Registration(Worker& w_, ClientConn* c_) : w(w_), c(c_) {
      w.stats.active_connections.fetch_add(1, std::memory_order_relaxed);
      w.conns.insert(c);
    }
    ~Registration() {
      w.conns.erase(c);
      w.stats.active_connections.fetch_sub(1, std::memory_order_relaxed);
    }
  } registration(w_, this);
  // A request path that throws is a bug; it must still never leak the connection (the deadline's
  // coroutine holds it alive until stopped): it is logged, counted and closed.
  std::string failure;
  try {
    co_await serve();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (failure.empty()) co_return;
  ex_->noteFailure(failure);
  ex_->stopWatch();
  ex_->deadline().stop();
  ex_->abortLegs(false);
  close();
}

// The connection's requests, one after another, until it closes (run() registers it and
// guards it).
asio::awaitable<void> ClientConn::serve() {
  ex_->setPeer(peer_);
  idle_timeout_ = w_.opts.client_idle_timeout;
  Deadline& deadline = ex_->deadline();
  // A listener with security 1 rules: the TLS handshake first (within the header timeout).
  if (auto cfg = l_->config.load(); cfg && cfg->tls) {
    const std::shared_ptr<http::TlsFiles> files = cfg->tls;  // (named locals)
    const std::shared_ptr<asio::ssl::context> ctx = files->current();
    const bool ok = co_await acceptTls(*files, ctx);
    if (!ok) {
      deadline.stop();
      co_return;
    }
    const unsigned char* proto = nullptr;
    unsigned int proto_len = 0;
    SSL_get0_alpn_selected(tls_->native(), &proto, &proto_len);
    if (proto_len == 2 && std::memcmp(proto, "h2", 2) == 0) {  // HTTP/2 by ALPN
      co_await serveH2();
      deadline.stop();
      co_return;
    }
  }
  Request req;
  while (client_.is_open()) {
    int hn = co_await readHead(req.head);
    if (hn == kH2PrefaceSeen) {
      co_await serveH2();
      break;
    }
    if (hn <= 0) break;
    if (std::string settings; h2UpgradeAsked(req.head, settings)) {
      co_await serveH2Upgrade(req.head, hn, std::move(settings));
      break;
    }
    beginRequest(req, hn);
    if (!co_await ex_->serve(req)) break;  // (no frame of the connection's own per request)
    in_.consume(std::min(req.head_bytes + req.raw_body_bytes, in_.size()));
    in_.shrinkIfEmpty(kKeepBufferBytes);  // one huge body does not pin its size per connection
    if (dechunked_.capacity() > kKeepBufferBytes) std::string().swap(dechunked_);
    if (!keepAlive()) break;
  }
  ex_->stopWatch();
  if (tls_ && client_.is_open() && !ex_->clientGone() && !ex_->relayCut()) {
    // TLS: close_notify, so a body that ends at the close is not taken for a truncation (at most
    // a second to send it: the deadline closes the socket under a peer that does not read).
    ex_->setPhase(Phase::kIdle);
    deadline.expireAfter(std::chrono::seconds(1));
    co_await tls_->shutdown(client_);
  }
  deadline.stop();
  ex_->abortLegs(false);
  // (TLS: not after a read met the end; Asio attempts no read at once after a 0-byte peek, and
  // nothing is left to drain anyway)
  if (client_.is_open() && !ex_->clientGone() && !(tls_ && (ex_->relayCut() || client_eof_)))
    co_await lingeringClose(client_);
  close();
}

// One request whose head is in in_, before the exchange serves it (its body read by readBody).
void ClientConn::beginRequest(Request& req, int hn) {
  req.head_bytes = static_cast<size_t>(hn);
  req.raw_body_bytes = 0;
  req.body = {};
  req.body_capacity = 0;
  client_minor_ = req.head.version_minor;
  client_keep_alive_ = req.head.keep_alive;
}

bool ClientConn::h2UpgradeAsked(const http::RequestHead& head, std::string& settings) const {
  // (HTTP/1.0: Upgrade is ignored, RFC 9110 §7.8)
  if (tls_ || !w_.opts.http2 || ex_->requestSeq() != 1 || l_->closed.load() ||
      head.version_minor != 1)
    return false;
  if (head.body_kind == http::BodyKind::kChunked || head.body_kind == http::BodyKind::kUntilClose ||
      (head.body_kind == http::BodyKind::kLength && head.content_length != 0))
    return false;  // (the body would have to be read before the switch: served as HTTP/1.1)
  const std::string_view upgrade = head.get("upgrade");
  const std::string_view conn = head.get("connection");
  if (upgrade.empty() || !http::headerHasToken(upgrade, "h2c") ||
      !http::headerHasToken(conn, "upgrade") || !http::headerHasToken(conn, "http2-settings"))
    return false;
  std::string_view value;
  int n = 0;
  for (size_t i = 0; i < head.num_headers; ++i)
    if (http::iequals(head.headers[i].name, "http2-settings")) {
      value = head.headers[i].value;
      ++n;
    }
  return n == 1 && h2::decodeHttp2Settings(value, settings);
}

// `Upgrade: h2c`: 101, then the connection is HTTP/2 and the request its stream 1.
asio::awaitable<void> ClientConn::serveH2Upgrade(const http::RequestHead& head, int hn,
                                                 std::string settings) {
  static constexpr std::string_view k101 =
      "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n";
  auto up = std::make_unique<H2Conn::Upgrade>();
  up->settings = std::move(settings);
  up->method.assign(head.method);
  up->request.assign(in_.data(), static_cast<size_t>(hn));  // (its Upgrade fields are hop-by-hop)
  in_.consume(static_cast<size_t>(hn));
  if (!co_await write(k101, {})) co_return;
  ex_->deadline().clear();
  ex_->setPhase(Phase::kIdle);
  std::string preread(in_.data(), in_.size());  // (the client's preface may have come already)
  in_.clear();
  in_.shrinkIfEmpty(0);
  h2_ = std::make_shared<H2Conn>(w_, l_, std::move(client_), peer_);
  const std::shared_ptr<H2Conn> h2 = h2_;
  co_await h2->run(std::move(preread), std::move(up));
  h2_.reset();
}

// The connection opened with HTTP/2's preface: an H2Conn takes the socket and the bytes read.
asio::awaitable<void> ClientConn::serveH2() {
  ex_->deadline().clear();
  ex_->setPhase(Phase::kIdle);
  std::string preread(in_.data(), in_.size());
  in_.clear();
  in_.shrinkIfEmpty(0);
  h2_ = std::make_shared<H2Conn>(w_, l_, std::move(client_), peer_, std::move(tls_),
                                 std::move(tls_ctx_));
  const std::shared_ptr<H2Conn> h2 = h2_;
  co_await h2->run(std::move(preread));
  h2_.reset();
}

asio::awaitable<void> serveClient(Worker& w, std::shared_ptr<Listener> l, tcp::socket sock,
                                  tcp::endpoint peer) {
  auto conn = std::make_shared<ClientConn>(w, std::move(l), std::move(sock));
  conn->setPeer(peer);
  co_await conn->run();
}

asio::awaitable<void> acceptLoop(Worker& w, std::shared_ptr<Listener> l,
                                 std::shared_ptr<tcp::acceptor> acc) {
  constexpr int kAcceptPauseMs = 100;
  auto last_warned = std::chrono::steady_clock::time_point{};
  while (acc->is_open()) {
    error_code ec;
    // The memory bound's last level (proxy/overload.h): no new connections; they wait in the
    // backlog, checked again every 100 ms.
    if (w.stats.overload.level.load(std::memory_order_relaxed) >=
        static_cast<uint8_t>(Overload::kPause)) {
      asio::steady_timer pause(w.io, std::chrono::milliseconds(kAcceptPauseMs));
      co_await pause.async_wait(useEc(ec));
      continue;
    }
    tcp::endpoint peer;  // (from accept itself: no getpeername later)
    tcp::socket s = co_await acc->async_accept(peer, useEc(ec));
    if (ec) {
      if (!acc->is_open() || ec == asio::error::operation_aborted) break;
      // Out of descriptors or memory: the pending connection stays in the backlog and the
      // listener stays readable, so retrying at once would spin a core. Pause, count, and say
      // so (at most every 10 s per worker); accepting resumes by itself once a descriptor frees.
      const int starved = acceptStarved(ec);
      const bool fds = starved == 1;
      if (starved) {
        w.stats.accept_failures[fds ? 0 : 1].fetch_add(1, std::memory_order_relaxed);
        const auto now = std::chrono::steady_clock::now();
        if (now - last_warned >= std::chrono::seconds(10)) {
          last_warned = now;
          log::warn("proxy", "accept failed (" + ec.message() +
                                 "): new connections wait in the backlog; " +
                                 (fds ? "raise the open-files limit (ulimit -n) or lower the load"
                                      : "the machine is short of memory"));
        }
        asio::steady_timer pause(w.io, std::chrono::milliseconds(kAcceptPauseMs));
        co_await pause.async_wait(useEc(ec));
      }
      continue;
    }
    if (w.draining) break;
    s.set_option(tcp::no_delay(true), ec);
    s.non_blocking(true, ec);  // for the non-blocking first write (writeTwo)
    asio::co_spawn(w.io, serveClient(w, l, std::move(s), peer), asio::detached);
  }
}

asio::awaitable<void> poolSweeper(Worker& w) {
  asio::steady_timer t(w.io);
  while (!w.draining) {
    t.expires_after(std::chrono::seconds(1));
    error_code ec;
    co_await t.async_wait(useEc(ec));
    w.pool.sweep(std::chrono::steady_clock::now());
  }
  w.pool.clear();
}

void drainWorker(Worker& w) {
  w.draining = true;
  // Copy: closing a connection may end its coroutine, which erases it from the set.
  std::vector<ClientConn*> conns(w.conns.begin(), w.conns.end());
  for (ClientConn* c : conns) c->onDrain();
  w.pool.clear();
}

}  // namespace kvgate::proxy
