#include "proxy/upstream_leg.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "http/readiness.h"

namespace kvgate::proxy {

// Upstream reads start with 4 KiB of room (an SSE event fits; an open stream keeps one page) and
// double, up to 64 KiB, while reads fill the room they were given (large bodies).
constexpr size_t kLegReadMin = 4 * 1024;
constexpr size_t kLegReadMax = 64 * 1024;
// A read asks for the room that brings the buffer to read_room_ bytes, and at least this much: a
// partial response head left in the buffer is completed in place instead of doubling it.
constexpr size_t kLegReadFloor = 1024;

void UpstreamLeg::begin(endpoints::EndpointId id) {
  close();
  buf_.clear();
  id_ = id;
  timed_out_ = false;
  abandoned_ = false;
  clean_eof_ = false;
  grow_room_ = true;
  interim_count_ = 0;
  read_room_ = kLegReadMin;
  reused_ = false;
}

bool UpstreamLeg::takePooled(endpoints::EndpointId id, const http::BackendTls* tls,
                             std::string_view tls_name) {
  begin(id);
  const std::shared_ptr<asio::ssl::context> ctx = tls ? tls->current() : nullptr;
  reused_ = pool_.take(id, ctx.get(), tls_name, conn_);
  return reused_;
}

asio::awaitable<UpstreamLeg::Result> UpstreamLeg::connect(endpoints::EndpointId id,
                                                          const tcp::endpoint& addr,
                                                          std::string_view label,
                                                          const http::BackendTls* tls,
                                                          std::string_view tls_name) {
  begin(id);
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
  if (tls) co_return co_await handshake(*tls, tls_name, label);
  co_return Result{};
}

// TLS to the engine: SNI for a host name; with verify_server_cert the certificate must carry
// `name` (a DNS name, or an IP address SAN). A failed handshake is a connect failure (nothing was
// sent: a retry elsewhere is safe).
asio::awaitable<UpstreamLeg::Result> UpstreamLeg::handshake(const http::BackendTls& tls,
                                                            std::string_view name,
                                                            std::string_view label) {
  conn_.tls_name = std::string(name);
  const error_code ec =
      co_await http::clientHandshake(conn_.sock, tls, conn_.tls_name, conn_.ctx, conn_.tls);
  if (!ec && conn_.sock.is_open()) co_return Result{};
  close();
  Result r{Outcome::kConnectFailed, true, false, {}};
  r.error = "TLS handshake with " + std::string(label) +
            " failed: " + (timed_out_ ? std::string("timeout") : ec.message());
  co_return r;
}

asio::awaitable<UpstreamLeg::Result> UpstreamLeg::send(std::string_view head,
                                                       std::string_view body) {
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

asio::awaitable<bool> UpstreamLeg::readSome() {
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
  } else if (timed_out_) {
    r.outcome = Outcome::kTimeout;
    r.error = "upstream did not answer in time";
  } else {
    r.outcome = Outcome::kClosed;
    r.retry_safe = reused_ && !got_bytes && interim_count_ == 0;
    r.error = "upstream closed the connection";
  }
  interim_count_ = 0;
  close();
  co_return r;
}

void UpstreamLeg::release(bool complete) {
  if (complete && buf_.empty() && conn_.drained() && conn_.isOpen() && !timed_out_)
    pool_.put(id_, std::move(conn_));
  else
    close();
  conn_ = UpstreamConn(io_);
  buf_.clear();
  buf_.shrinkIfEmpty(256 * 1024);
}

}  // namespace kvgate::proxy
