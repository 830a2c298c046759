// One request through its phases (exchange.h): the gates before its body (a removed service, the
// gateway's memory bound), the body (the client side reads it), dispatch (dispatch.cc: request
// facts, model pool, the gateway's own answers, then forward.cc or pd_forward.cc), and its end:
// counted (loxilb_ai_requests_total), logged (--access-log) and its state dropped (request_ctx.h).
// A multiplexed stream's request comes whole as HTTP/1.1 text (h2/bridge.h) through runStream.
#include "proxy/exchange.h"

#include "common/log.h"
#include "proxy/api_facts.h"
#include "routing/selectors/hash_ring.h"

namespace kvgate::proxy {
namespace {

// The client side of an exchange whose client is gone (detachClient): it takes nothing.
class GoneClient final : public ClientSide {
 public:
  bool multiplexed() const override { return false; }
  bool payloadOnly() const override { return true; }
  asio::awaitable<bool> write(std::string_view, std::string_view) override { co_return false; }
  asio::awaitable<error_code> writeRest(std::string_view, std::string_view, size_t) override {
    co_return error_code(asio::error::broken_pipe);
  }
  asio::awaitable<bool> readBody(Request&) override { co_return false; }
  bool requestReleasable() const override { return false; }
  void releaseRequest() override {}
  bool keepAlive() const override { return false; }
  void close() override {}
};
GoneClient gone_client;

}  // namespace

void Exchange::setPeer(const tcp::endpoint& peer) {
  const std::string ip = peer.port() == 0 ? std::string() : peer.address().to_string();
  source_key_ = routing::hashBytes(ip.data(), ip.size());
}

void Exchange::startDeadline() {
  auto self = shared_from_this();
  deadline_.start([self] { self->onDeadline(); }, [self] { self->onTick(); });
}

void Exchange::begin() {
  rq_.begin(std::chrono::steady_clock::now());
  ++request_seq_;
}

asio::awaitable<bool> Exchange::serve(Request& req) {
  // The API the target names (its errors' shape, its prompt's form); dispatch reads it again
  // from a target it normalizes.
  rq_.api = apiOf(req.head.target);
  rq_.head_method = req.head.method == "HEAD";  // (the gateway's own answers: no body)
  if (l_->closed.load()) {
    takeRequestId(req.head);
    co_await sendError(503, "service_unavailable", "service removed", {}, true);
    countAndLog();
    co_return false;
  }
  // Over the memory bound (proxy/overload.h): refused before its body is read or anything is
  // routed, and the connection closed (it holds memory and a descriptor).
  if (w_.stats.overload.level.load(std::memory_order_relaxed) != 0) {
    w_.stats.overload_shed.fetch_add(1, std::memory_order_relaxed);
    takeRequestId(req.head);
    co_await sendError(503, "gateway_overloaded",
                       "the gateway is at its memory bound (--max-heap-bytes); try again", {}, true,
                       1);
    countAndLog();
    co_return false;
  }
  if (!co_await client_->readBody(req)) {  // 413, a malformed chunked body, 408, or the client left
    countAiRequest();
    if (w_.opts.access_log && rq_.outcome.status != 0) {  // (answered: logged like any answer)
      takeRequestId(req.head);
      logAccess();
    }
    co_return false;
  }
  deadline_.clear();  // (the head's and the body's time is over)
  bool ok = co_await dispatch(req);
  stopWatch();  // no watcher outlives its request (it would read the next one)
  countAndLog();
  rq_.end(kKeepBufferBytes);
  pdAfterRequest();
  co_return ok && !client_gone_;
}

asio::awaitable<void> Exchange::runStream(std::string request) {
  auto self = shared_from_this();
  startDeadline();
  stream_in_.append(request.data(), request.size());
  std::string().swap(request);
  std::string failure;
  try {
    // (client_gone_: the stream was reset before this ran; nothing is sent to an engine)
    if (!client_gone_) {
      Request req;
      http::ParseError perr;
      phase_ = Phase::kHead;
      deadline_.expireAfter(w_.opts.header_timeout);  // (the gates' answers are bounded too)
      const int hn = http::parseRequestHead(stream_in_.data(), stream_in_.size(),
                                            w_.opts.max_head_bytes, req.head, perr);
      // The bridge wrote a whole head and a body of exactly its Content-Length (anything else
      // is not served: the stream ends unanswered, counted as cancelled).
      const size_t len = hn > 0 && req.head.body_kind == http::BodyKind::kLength
                             ? static_cast<size_t>(req.head.content_length)
                             : 0;
      if (hn < 0) {
        begin();
        co_await refuseHead(perr);
      } else if (hn > 0 &&
                 (req.head.body_kind == http::BodyKind::kLength ||
                  req.head.body_kind == http::BodyKind::kNone) &&
                 stream_in_.size() >= static_cast<size_t>(hn) + len) {
        begin();
        req.head_bytes = static_cast<size_t>(hn);
        req.raw_body_bytes = len;
        req.body = std::string_view(stream_in_.data() + req.head_bytes, len);
        req.body_capacity = stream_in_.readableFrom(req.body.data());
        co_await serve(req);
      } else if (hn > 0) {
        begin();
        countAiRequest();
      }
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) noteFailure(failure);
  deadline_.stop();
  abortLegs(false);
  const bool complete = failure.empty() && !relay_cut_ && !client_gone_ && rq_.outcome.status != 0;
  ClientSide& client = *client_;
  detachClient();
  client.finish(complete);
}

asio::awaitable<void> Exchange::refuseHead(const http::ParseError& perr) {
  co_await sendError(perr.status, "bad_request", perr.reason, {}, true);
  countAndLog();
}

void Exchange::clientLeft() {
  if (client_gone_) return;
  client_gone_ = true;
  abortLegs(false);
}

void Exchange::detachClient() { client_ = &gone_client; }

void Exchange::stopWatch() {
  watch_wanted_ = false;  // the wait is over: the tick must not start a watcher now
  client_->unwatch();
}

void Exchange::noteFailure(const std::string& what) {
  w_.stats.internal_errors.fetch_add(1, std::memory_order_relaxed);
  const auto now = std::chrono::steady_clock::now();
  if (now - w_.internal_error_logged >= std::chrono::seconds(10)) {
    w_.internal_error_logged = now;
    log::error("proxy", "a request failed inside the gateway (the connection is closed): " + what);
  }
}

}  // namespace kvgate::proxy
