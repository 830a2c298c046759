#include "proxy/upstream_leg.h"

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "http/readiness.h"
#include "proxy/h2/upstream_session.h"

namespace kvgate::proxy {

// Upstream reads start with 4 KiB of room (an SSE event fits; an open stream keeps one page) and
// double, up to 64 KiB, while reads fill the room they were given (large bodies).
constexpr size_t kLegReadMin = 4 * 1024;
constexpr size_t kLegReadMax = 64 * 1024;
// A read asks for the room that brings the buffer to read_room_ bytes, and at least this much: a
// partial response head left in the buffer is completed in place instead of doubling it.
constexpr size_t kLegReadFloor = 1024;

UpstreamLeg::~UpstreamLeg() { resetH2(); }

void UpstreamLeg::close() {
  conn_.close();
  if (h2_wait_) h2_wait_->cancel();
  // HTTP/2: this exchange's stream is reset (the session goes on); the pointers stay until the
  // exchange ends, so a read or send waiting on the stream sees it end.
  if (h2_stream_ && h2_session_) h2_session_->finish(h2_stream_);
}

void UpstreamLeg::resetH2(bool complete) {
  if (h2_stream_ && h2_session_) h2_session_->finish(h2_stream_, complete);
  if (!h2_stream_ && h2_session_) h2_session_->unclaim();  // (taken, never opened)
  h2_stream_.reset();
  h2_session_.reset();
}

void UpstreamLeg::begin(endpoints::EndpointId id) {
  close();
  resetH2();
  http2_ = false;
  buf_.clear();
  id_ = id;
  timed_out_ = false;
  abandoned_ = false;
  aborted_ = false;
  clean_eof_ = false;
  grow_room_ = true;
  interim_count_ = 0;
  read_room_ = kLegReadMin;
  reused_ = false;
}

bool UpstreamLeg::takePooled(endpoints::EndpointId id, const http::BackendTls* tls,
                             std::string_view tls_name, BackendProtocol proto) {
  begin(id);
  const std::shared_ptr<asio::ssl::context> ctx = tls ? tls->current() : nullptr;
  // (both: a session with room if this worker has one to the endpoint, else an idle HTTP/1.1
  // connection: the pools hold what the engine chose)
  if (proto != BackendProtocol::kHttp1) {
    h2_session_ = pool_.takeH2(id, ctx.get(), tls_name);
    http2_ = reused_ = h2_session_ != nullptr;
    if (reused_ || proto == BackendProtocol::kHttp2) return reused_;
  }
  reused_ = pool_.take(id, ctx.get(), tls_name, conn_);
  return reused_;
}

asio::awaitable<UpstreamLeg::Result> UpstreamLeg::connect(
    endpoints::EndpointId id, const tcp::endpoint& addr, std::string_view label,
    const http::BackendTls* tls, std::string_view tls_name, BackendProtocol proto) {
  begin(id);
  const bool both = proto == BackendProtocol::kBoth;
  // both: HTTP/2 first (over TLS offering h2 and http/1.1: the engine's ALPN choice decides
  // below), unless the engine chose HTTP/1.1 lately.
  http2_ = proto == BackendProtocol::kHttp2 ||
           (both && pool_.triesH2(id, std::chrono::steady_clock::now()));
  conn_ = UpstreamConn(io_);
  // HTTP/2: one connect per endpoint at a time in this worker; the legs that come meanwhile
  // share what it makes (each ends that connect's wait on every path: RAII).
  struct EndConnect {
    UpstreamPool* pool = nullptr;
    endpoints::EndpointId id = 0;
    ~EndConnect() {
      if (pool) pool->endH2Connect(id);
    }
  } end_connect;
  if (http2_) {
    const std::shared_ptr<asio::ssl::context> ctx = tls ? tls->current() : nullptr;
    if (co_await awaitH2Connect(id, ctx.get(), tls_name)) co_return Result{};
    if (timed_out_ || abandoned_ || aborted_) {
      Result r{timed_out_ ? Outcome::kTimeout : Outcome::kConnectFailed, false, false, {}};
      r.error = "connect to " + std::string(label) +
                " failed: " + (timed_out_ ? std::string("timeout") : std::string("given up"));
      co_return r;
    }
    // (both: the connect waited for found an engine of HTTP/1.1: take a connection of that)
    if (both && !pool_.triesH2(id, std::chrono::steady_clock::now())) {
      http2_ = false;
    } else {
      pool_.beginH2Connect(id);
      end_connect.pool = &pool_;
      end_connect.id = id;
    }
  }
  if (Result r = co_await openSocket(addr, label); !r.ok()) co_return r;
  if (tls) {
    Result r = co_await handshake(*tls, tls_name, label, proto);
    if (!r.ok()) co_return r;
  }
  if (http2_ && conn_.tls) {
    const unsigned char* p = nullptr;
    unsigned int n = 0;
    SSL_get0_alpn_selected(conn_.tls->native(), &p, &n);
    const bool h2 = std::string_view(reinterpret_cast<const char*>(p), p ? n : 0) == "h2";
    if (both) {  // the engine chose: HTTP/2, or this connection is HTTP/1.1 (learned)
      http2_ = h2;
      if (!h2) pool_.learnHttp1(id, std::chrono::steady_clock::now());
      pool_.countLearned(h2 ? 0 : 1);
    } else if (!h2) {  // (no HTTP/1.1 fallback: the rule says http2)
      close();
      Result r{Outcome::kConnectFailed, true, false, {}};
      r.error = "engine " + std::string(label) +
                " did not choose HTTP/2 by ALPN (the rule's backend_protocol is http2)";
      co_return r;
    }
  }
  if (!http2_) co_return Result{};
  h2_session_ = pool_.addH2(id, std::move(conn_), io_);
  conn_ = UpstreamConn(io_);
  // Used once the engine's SETTINGS came (its stream limit known, so the legs waiting for this
  // connect spread by it), within the connect deadline.
  const bool ok = co_await h2_session_->settled(h2_wait_);
  if (ok && h2_session_->streamLimit() == 0) {  // (it takes no stream now: another endpoint)
    resetH2();
    Result r{Outcome::kConnectFailed, true, false, {}};
    r.error = "engine " + std::string(label) + " takes no HTTP/2 stream now (its SETTINGS)";
    co_return r;
  }
  if (!ok && h2_session_->spokeHttp1() && both && !tls && !timed_out_ && !aborted_) {
    // An HTTP/1.1 engine (it answered h2c's preface in HTTP/1.1): learned, and this exchange
    // goes over a new HTTP/1.1 connection (nothing was processed: the preface is no request).
    // (Over TLS the engine chose h2 by ALPN: answering HTTP/1.1 there is a failure, never a
    // reason to reconnect without TLS.)
    resetH2();
    pool_.learnHttp1(id, std::chrono::steady_clock::now());
    pool_.countLearned(3);
    http2_ = false;
    co_return co_await openSocket(addr, label);
  }
  if (!ok) {
    const bool http1 = h2_session_->spokeHttp1();
    resetH2();
    Result r{timed_out_ ? Outcome::kTimeout : Outcome::kConnectFailed, !timed_out_, false, {}};
    r.error =
        "HTTP/2 connection to " + std::string(label) + " failed: " +
        (timed_out_     ? std::string("no SETTINGS in time")
         : http1 && tls ? std::string("the engine chose h2 by ALPN, then answered in HTTP/1.1")
         : http1        ? std::string("the engine answered in HTTP/1.1 (the rule's "
                                             "backend_protocol is http2; both would fall back)")
                        : std::string("closed before its SETTINGS"));
    co_return r;
  }
  if (both) {
    pool_.learnHttp2(id);
    if (!tls) pool_.countLearned(2);
  }
  co_return Result{};
}

// A TCP connection to `addr` in conn_ (no delay, non-blocking for the first write).
asio::awaitable<UpstreamLeg::Result> UpstreamLeg::openSocket(const tcp::endpoint& addr,
                                                             std::string_view label) {
  conn_ = UpstreamConn(io_);
  error_code ec;
  co_await conn_.sock.async_connect(addr, useEc(ec));
  if (ec || !conn_.sock.is_open()) {
    close();
    Result r{Outcome::kConnectFailed, true, false, {}};
    r.starved = acceptStarved(ec);  // (socket() failed: the same errno set as accept)
    r.error = "connect to " + std::string(label) +
              " failed: " + (timed_out_ ? std::string("timeout") : ec.message());
    co_return r;
  }
  conn_.sock.set_option(tcp::no_delay(true), ec);
  conn_.sock.non_blocking(true, ec);  // for the non-blocking first write (writeTwo)
  co_return Result{};
}

// TLS to the engine: SNI for a host name; with verify_server_cert the certificate must carry
// `name` (a DNS name, or an IP address SAN). A failed handshake is a connect failure (nothing was
// sent: a retry elsewhere is safe).
asio::awaitable<UpstreamLeg::Result> UpstreamLeg::handshake(const http::BackendTls& tls,
                                                            std::string_view name,
                                                            std::string_view label,
                                                            BackendProtocol proto) {
  conn_.tls_name = std::string(name);
  // ALPN: h2 alone for http2; h2 then http/1.1 for both (the engine chooses); none for http1.
  const std::string_view alpn = !http2_ ? std::string_view()
                                : proto == BackendProtocol::kBoth
                                    ? std::string_view("\x02h2\x08http/1.1")
                                    : std::string_view("\x02h2");
  const error_code ec =
      co_await http::clientHandshake(conn_.sock, tls, conn_.tls_name, conn_.ctx, conn_.tls, alpn);
  if (!ec && conn_.sock.is_open()) co_return Result{};
  close();
  Result r{Outcome::kConnectFailed, true, false, {}};
  r.error = "TLS handshake with " + std::string(label) +
            " failed: " + (timed_out_ ? std::string("timeout") : ec.message());
  if (http2_ && proto == BackendProtocol::kHttp2)
    r.error += " (HTTP/2 by ALPN offered alone: the rule's backend_protocol is http2)";
  co_return r;
}

asio::awaitable<UpstreamLeg::Result> UpstreamLeg::send(std::string_view head,
                                                       std::string_view body) {
  if (http2_) co_return co_await sendH2(head, body);
  size_t n = 0;
  error_code ec;
  if (conn_.tls) {
    ec = co_await conn_.tls->write(conn_.sock, head, body);
  } else if (!writeNow(conn_.sock, head, body, n, ec)) {
    ec = co_await writeRest(conn_.sock, head, body, n);
  }
  if (!ec) co_return Result{};
  close();
  Result r{timed_out_ ? Outcome::kTimeout : Outcome::kSendFailed, reused_ && !timed_out_, false,
           ec.message()};
  co_return r;
}

// HTTP/2: while another leg of this worker connects to the endpoint, waits for its connection;
// true when a session with room was found (this leg's session).
asio::awaitable<bool> UpstreamLeg::awaitH2Connect(endpoints::EndpointId id,
                                                  const asio::ssl::context* ctx,
                                                  std::string_view tls_name) {
  while (pool_.h2Connecting(id) && !timed_out_ && !abandoned_ && !aborted_) {
    asio::steady_timer t(io_, asio::steady_timer::time_point::max());
    struct Unwait {  // (also when the frame is destroyed while it waits)
      UpstreamLeg& leg;
      endpoints::EndpointId id;
      asio::steady_timer* t;
      ~Unwait() {
        leg.h2_wait_ = nullptr;
        leg.pool_.unwaitH2(id, t);
      }
    } unwait{*this, id, &t};
    pool_.waitH2(id, &t);
    h2_wait_ = &t;
    error_code ec;
    co_await t.async_wait(useEc(ec));
    if (timed_out_ || abandoned_ || aborted_) break;
    h2_session_ = pool_.takeH2(id, ctx, tls_name);
    if (h2_session_) co_return true;
  }
  co_return false;
}

// HTTP/2: the request is submitted as a stream and sent when its END_STREAM went out (or the
// engine answered first). Not sent because the engine did not process it, or because the reused
// connection ended before any answer: retry_safe, as a stale keep-alive connection.
asio::awaitable<UpstreamLeg::Result> UpstreamLeg::sendH2(std::string_view head,
                                                         std::string_view body) {
  std::string err = "no HTTP/2 connection";
  bool retryable = true;
  if (h2_session_) h2_stream_ = h2_session_->open(head, body, err, retryable);
  if (!h2_stream_) {
    h2_session_.reset();  // (open() gave the claim back)
    Result r{Outcome::kSendFailed, retryable, false, err};
    co_return r;
  }
  const std::shared_ptr<h2::UpstreamStream> s = h2_stream_;  // (outlives the wait)
  while (!s->sent && !s->ended && !s->cancelled && !s->final_head) {
    s->waiter.expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    co_await s->waiter.async_wait(useEc(ec));
  }
  if (!s->cancelled && (s->sent || s->final_head)) co_return Result{};
  if (s->malformed) {  // (an early answer the gateway refused: the engine answered, no resend)
    Result r{Outcome::kBadResponse, false, false,
             "malformed HTTP/2 response from upstream: a head over " +
                 std::to_string(kMaxResponseHead) + " bytes or more than " +
                 std::to_string(kMaxInterim) + " interim heads"};
    close();
    co_return r;
  }
  Result r{timed_out_ ? Outcome::kTimeout : Outcome::kSendFailed,
           !timed_out_ && !abandoned_ && !aborted_ && s->unprocessed, false,
           s->unprocessed ? "the engine did not process the HTTP/2 stream"
           : s->conn_lost ? "the HTTP/2 connection to the engine ended"
                          : "the engine reset the HTTP/2 stream"};
  close();
  co_return r;
}

// HTTP/2: the stream's response bytes (HTTP/1.1 text) into buf(); its window reopens by as much.
asio::awaitable<bool> UpstreamLeg::readSomeH2() {
  const std::shared_ptr<h2::UpstreamStream> s = h2_stream_;
  if (!s) co_return false;
  for (;;) {
    if (!s->data.empty()) {
      auto b = buf_.prepare(s->data.size());
      std::memcpy(b.data(), s->data.data(), s->data.size());
      buf_.commit(s->data.size());
      if (s->data.capacity() > kLegReadMax)
        std::string().swap(s->data);
      else
        s->data.clear();
      if (h2_session_) h2_session_->consumed(*s, std::exchange(s->unconsumed, 0));
      co_return true;
    }
    if (s->cancelled || s->ended || s->clean) {
      clean_eof_ = s->clean && !s->cancelled;  // the engine's END_STREAM
      co_return false;
    }
    observer_.onUpstreamWait();
    if (!grow_room_) buf_.shrinkIfEmpty(0);
    s->waiter.expires_at(asio::steady_timer::time_point::max());
    error_code ec;
    co_await s->waiter.async_wait(useEc(ec));
  }
}

asio::awaitable<bool> UpstreamLeg::readSome() {
  if (http2_) co_return co_await readSomeH2();
  // Plain TCP: a recv only when bytes may be there (the last read filled its room, or an epoll
  // edge came since a read of ours drained the socket), else a wait that costs no syscall and
  // takes no buffer memory (http/readiness.h; before it, each response began with a recv that
  // failed with EAGAIN). When a read has to wait, the owner is told (it watches the client if
  // the wait lasts).
  if (!conn_.isOpen()) co_return false;
  error_code ec;
  if (conn_.tls) {
    observer_.onUpstreamWait();
    auto b = buf_.prepare(readRoom());
    size_t n =
        co_await conn_.tls->readSome(conn_.sock, static_cast<char*>(b.data()), b.size(), ec);
    // A clean end: a close_notify (a TLS body cut by a bare TCP close is not).
    clean_eof_ = (ec == asio::error::eof) || (!ec && n == 0);
    if (ec || n == 0) co_return false;
    noteRead(n, b.size());
    co_return true;
  }
  for (uint32_t woke_by = http::kUnknownEvents, waits = 0;; ++waits) {
    if (http::worthRecv(conn_.sock, woke_by)) {
      auto b = buf_.prepare(readRoom());
      size_t n = 0;
      switch (http::tryRecv(conn_.sock, static_cast<char*>(b.data()), b.size(), n, ec, woke_by)) {
        case http::RecvResult::kBytes:
          noteRead(n, b.size());
          co_return true;
        case http::RecvResult::kEof:
          clean_eof_ = true;  // a clean end: TCP EOF
          co_return false;
        case http::RecvResult::kError:
          clean_eof_ = false;
          co_return false;
        case http::RecvResult::kWouldBlock:
          break;
      }
    }
    if (waits == 0) observer_.onUpstreamWait();
    if (!grow_room_) buf_.shrinkIfEmpty(0);  // an event stream between events (keepReadRoomSmall)
    http::watchPeerClose(conn_.sock);  // (once per connection: lets a short read prove it drained)
    woke_by = co_await http::asyncWaitReadable(conn_.sock, useEc(ec));
    if (ec || !conn_.isOpen()) {  // aborted: the deadline or the client's departure closed it
      clean_eof_ = false;
      co_return false;
    }
  }
}

void UpstreamLeg::keepReadRoomSmall() {
  grow_room_ = false;
  read_room_ = kLegReadMin;
}

size_t UpstreamLeg::readRoom() const {
  return read_room_ > buf_.size() + kLegReadFloor ? read_room_ - buf_.size() : kLegReadFloor;
}

void UpstreamLeg::noteRead(size_t n, size_t room) {
  buf_.commit(n);
  if (n == room && grow_room_ && read_room_ < kLegReadMax) read_room_ *= 2;
}

asio::awaitable<UpstreamLeg::Result> UpstreamLeg::readHead(std::string_view method,
                                                           http::ResponseHead& rh) {
  http::ParseError perr;
  bool got_bytes = !buf_.empty();
  int hn;
  while ((hn = http::parseResponseHead(buf_.data(), buf_.size(), kMaxResponseHead, method, rh,
                                       perr)) == 0) {
    if (!co_await readSome()) break;
    got_bytes = true;
  }
  Result r;
  if (hn > 0) {
    if (rh.status == 101) {  // we never ask for an upgrade (Upgrade is hop-by-hop)
      r.outcome = Outcome::kBadResponse;
      r.error = "upstream switched protocols (101) without an upgrade request";
    } else if (rh.status >= 100 && rh.status < 200) {
      if (++interim_count_ > kMaxInterim) {
        r.outcome = Outcome::kBadResponse;
        r.error = "more than " + std::to_string(kMaxInterim) + " interim responses";
      } else {
        r.interim = true;
        co_return r;
      }
    } else {
      interim_count_ = 0;
      co_return r;
    }
  } else if (hn < 0) {
    r.outcome = Outcome::kBadResponse;
    r.error = std::string("malformed response from upstream: ") + perr.reason;
  } else if (h2_stream_ && h2_stream_->malformed) {
    r.outcome = Outcome::kBadResponse;
    r.error = "malformed HTTP/2 response from upstream: a head over " +
              std::to_string(kMaxResponseHead) + " bytes or more than " +
              std::to_string(kMaxInterim) + " interim heads";
  } else if (timed_out_) {
    r.outcome = Outcome::kTimeout;
    r.error = "upstream did not answer in time";
  } else {
    r.outcome = Outcome::kClosed;
    r.retry_safe = reused_ && !got_bytes && interim_count_ == 0;
    if (h2_stream_)  // HTTP/2: only a stream the engine did not process (its HEADERS may be
      r.retry_safe = !abandoned_ && !aborted_ && h2_stream_->unprocessed;  // running otherwise)
    r.error = "upstream closed the connection";
  }
  interim_count_ = 0;
  close();
  co_return r;
}

void UpstreamLeg::release(bool complete) {
  if (http2_) {  // (the session stays; an unfinished stream is reset)
    resetH2(complete && buf_.empty());
    buf_.clear();
    buf_.shrinkIfEmpty(256 * 1024);
    return;
  }
  if (complete && buf_.empty() && conn_.drained() && conn_.isOpen() && !timed_out_)
    pool_.put(id_, std::move(conn_));
  else
    close();
  conn_ = UpstreamConn(io_);
  buf_.clear();
  buf_.shrinkIfEmpty(256 * 1024);
}

}  // namespace kvgate::proxy
