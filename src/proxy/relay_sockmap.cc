// The sockmap splice of a response body (issue 33 §2): on a sockMapMode response/both rule, the
// rest of a Content-Length body goes from the engine's socket to the client's in the kernel
// (sockmap/sockmap_relay.h), the gateway never reading it.
//
// Algorithm: the head and the body bytes that came with it have been written to the client
// (relay.cc); the rest is armed on the engine's socket (its waiting bytes first, in order); the
// wait ends on the program's notice: done (then the gateway waits until the whole body has
// entered the client's socket, which the kernel does from a work queue after the notice, so
// nothing the gateway writes next on the connection can overtake it), or the client's socket
// refusing it, or sockmapreset: both connections cut; an engine that closes mid-body (its socket
// leaves ESTABLISHED with no progress) cuts them too. While it
// waits the client is watched (a client that leaves cuts it) and the rule's data timeout runs
// from the last progress. An engine connection that sent bytes after the body is not pooled.
// Knobs: `serve --sockmap-min-bytes` (default 65536: a body with less left is relayed here) and
// `--sockmap-budget-bytes` (default 256 MiB: bodies armed at once, the kernel's queue for a slow
// client being unbounded; a body over it is relayed here).
#include "common/log.h"
#include "proxy/exchange.h"
#include "sockmap/sockmap_relay.h"

namespace kvgate::proxy {

namespace {
constexpr auto kSpliceTick = std::chrono::milliseconds(100);

struct SpliceWait {
  explicit SpliceWait(const asio::any_io_executor& ex) : timer(ex) {}
  asio::steady_timer timer;
  sockmap::Notice kind = sockmap::Notice::kNone;  // (the worker's thread only)
};
}  // namespace

bool Exchange::spliceWanted(const RelayFraming& f, const Route& route, bool stream,
                            bool head_request) {
  return route.rule.sockmap >= 2 && !f.splice_tried && client_->plainFd() >= 0 && !stream &&
         !head_request && f.kind == http::BodyKind::kLength && !f.decode && !f.complete &&
         f.remaining >= w_.opts.sockmap_min_bytes && leg_.bufEmpty() && leg_.plainFd() >= 0 &&
         sockmap::Relay::get() != nullptr;
}

asio::awaitable<int> Exchange::spliceBody(RelayFraming& f, const Route& route, RelayCut& cut) {
  f.splice_tried = true;  // (once a response: a refused arming is not asked again per read)
  sockmap::Relay* relay = sockmap::Relay::get();
  const int source = leg_.plainFd();
  const int cfd = client_->plainFd();
  sockmap::Registration* target = client_->sockmapTarget();
  if (!relay || source < 0 || cfd < 0 || !target) co_return 0;
  if (!*target) {  // (the client's registration: made at its first splice, kept while it lasts)
    *target = relay->addTarget(cfd);
    if (!*target) co_return 0;
  }
  uint64_t base = 0;
  if (!sockmap::Relay::exactQueuedTotal(cfd, base)) co_return 0;
  const uint64_t body = f.remaining;
  auto wait = std::make_shared<SpliceWait>(executor());
  const auto ex = executor();
  // (a weak reference: the notice thread never holds the wait's last reference, so its timer is
  // destroyed on this worker's thread)
  sockmap::Arming armed =
      relay->arm(source, target->cookie(), body,
                 [weak = std::weak_ptr<SpliceWait>(wait), ex](sockmap::Notice kind, uint64_t) {
                   asio::post(ex, [weak, kind] {
                     if (auto w = weak.lock()) {
                       w->kind = kind;
                       w->timer.cancel();
                     }
                   });
                 });
  if (!armed) co_return 0;  // (the budget or the maps said no: nothing was armed)
  // From here the body is the kernel's: a cut ends the exchange (armed's destructor disarms).
  const auto data_timeout = dataTimeout(route.rule);
  deadline_.expireAfter(data_timeout);
  watch_wanted_ = true;  // (the deadline's tick starts the client watcher)
  auto cutNow = [&]() {
    if (client_gone_)
      cut = RelayCut::kClient;
    else if (leg_.timedOut())
      cut = RelayCut::kTimeout;
    else
      return false;
    return true;
  };
  uint64_t seen = 0;
  while (wait->kind == sockmap::Notice::kNone) {
    wait->timer.expires_after(kSpliceTick);
    error_code ec;
    co_await wait->timer.async_wait(useEc(ec));
    if (wait->kind != sockmap::Notice::kNone) break;
    if (cutNow()) co_return -1;
    // (a notice the full ring buffer lost: the record says done)
    if (armed.remaining() == 0) {
      wait->kind = sockmap::Notice::kDone;
      break;
    }
    const uint64_t now = armed.relayed();
    if (now != seen) {
      seen = now;
      deadline_.expireAfter(data_timeout);
    } else if (!sockmap::Relay::established(source)) {  // the engine closed or reset mid-body
      log::warn("proxy", "response " + rq_.request_id + ": the engine closed its connection " +
                             std::to_string(armed.relayed()) + " bytes into a " +
                             std::to_string(body) + "-byte spliced body");
      cut = RelayCut::kUpstream;
      co_return -1;
    }
  }
  if (wait->kind != sockmap::Notice::kDone) {
    log::warn("proxy", "response " + rq_.request_id + ": the sockmap relay ended (" +
                           sockmap::noticeName(wait->kind) + ") after " +
                           std::to_string(armed.relayed()) + " of " + std::to_string(body) +
                           " body bytes");
    // (overrun: a guard the parser makes unreachable; gone: the client's socket refused it;
    // reset: the operator's sockmapreset)
    cut = wait->kind == sockmap::Notice::kOverrun && !client_gone_ ? RelayCut::kUpstream
                                                                   : RelayCut::kClient;
    co_return -1;
  }
  // Done: the body entered the client's socket once its queue total passes base + body.
  uint64_t last = base;
  for (auto pause = std::chrono::microseconds(200);;) {
    uint64_t q = 0;
    if (!sockmap::Relay::queuedTotal(cfd, q)) {
      cut = RelayCut::kClient;
      co_return -1;
    }
    if (q >= base + body) break;
    if (q != last) {
      last = q;
      deadline_.expireAfter(data_timeout);
    }
    wait->timer.expires_after(pause);
    error_code ec;
    co_await wait->timer.async_wait(useEc(ec));
    if (cutNow()) co_return -1;
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
  if (armed.detach() != 0) f.reusable = false;  // bytes after the body: not pooled
  f.remaining = 0;
  f.complete = true;
  rq_.outcome.bytes += body;
  co_return 1;
}

}  // namespace kvgate::proxy
