// Per-request state of a simulated worker (internal to src/sim): the disconnect watch and
// Worker::RequestCtx, whose destructor gives back the slot and the cache blocks on every path.
#pragma once
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <nlohmann/json.hpp>

#include "sim/worker.h"

namespace kvgate::sim {

// Watches a connection while its request waits, to notice a client that went away.
struct DisconnectWatch {
  bool done = false;  // the request ended: the socket may be gone, touch nothing
  bool disconnected = false;
  asio::steady_timer* timer = nullptr;  // the request's timer, cancelled on disconnect
};

inline asio::awaitable<void> watchDisconnect(tcp::socket& sock,
                                             std::shared_ptr<DisconnectWatch> w) {
  for (;;) {
    if (w->done || !sock.is_open()) co_return;
    error_code ec;
    co_await sock.async_wait(tcp::socket::wait_read, useEc(ec));
    if (w->done || ec == asio::error::operation_aborted || !sock.is_open()) co_return;
    if (!ec) {
      char b;
      ssize_t n = ::recv(sock.native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) co_return;  // pipelined bytes, not a disconnect: stop watching
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    }
    w->disconnected = true;  // EOF or a socket error
    if (w->timer) w->timer->cancel();
    co_return;
  }
}

// A parsed inference request.
struct Worker::Inference {
  std::string model;
  std::vector<uint32_t> prompt;
  int64_t max_tokens = 0;
  bool stream = false;
  bool include_usage = false;
  // The P/D fields, as sent (null when absent): vLLM kv_transfer_params, SGLang bootstrap_host /
  // bootstrap_port / bootstrap_room, TensorRT-LLM disaggregated_params.
  nlohmann::json kv_transfer_params, bootstrap_host, bootstrap_port, bootstrap_room,
      disaggregated_params;
};

// What the P/D role decided for a request (sim/pd_role.cc).
struct Worker::PdPlan {
  std::string hold_key;  // prefill: hold the prompt's blocks under this key once prefilled
  std::string token;     // prefill (TensorRT-LLM): the opaque state the decode must bring back
  nlohmann::ordered_json answer_params;  // prefill: kv_transfer_params / disaggregated_params
  size_t transfer_blocks = 0;            // decode: blocks pulled from the prefill worker
};

// Per-request state; the destructor gives back the slot and the cache blocks on every path.
struct Worker::RequestCtx {
  RequestCtx(Worker& w, tcp::socket& s)
      : worker(w), sock(s), timer(s.get_executor()), watch(std::make_shared<DisconnectWatch>()) {
    watch->timer = &timer;
    worker.active_.insert(this);
    asio::co_spawn(s.get_executor(), watchDisconnect(s, watch), asio::detached);
  }
  ~RequestCtx() {
    watch->done = true;
    watch->timer = nullptr;
    error_code ec;
    if (sock.is_open()) sock.cancel(ec);  // ends the watch's pending wait
    if (queued) {
      auto it = std::find(worker.waiters_.begin(), worker.waiters_.end(), this);
      if (it != worker.waiters_.end()) worker.waiters_.erase(it);
    }
    if (granted) worker.releaseSlot();
    if (seq) {  // the engine drops it at its next step and frees its blocks
      seq->wake = nullptr;
      seq->on_admit = nullptr;
      if (seq->state != Seq::State::kDone) seq->aborted = true;
    }
    if (has_alloc) worker.ranks_[rank]->cache.release(alloc);
    worker.active_.erase(this);
  }
  bool aborted() const { return worker.stopping_ || watch->disconnected; }

  Worker& worker;
  tcp::socket& sock;
  asio::steady_timer timer;
  std::shared_ptr<DisconnectWatch> watch;
  bool queued = false;
  bool granted = false;
  bool has_alloc = false;
  size_t rank = 0;  // the data-parallel engine serving the request
  PrefixCache::Allocation alloc;
  std::shared_ptr<Seq> seq;     // --timing step: the request in its rank's engine
  bool awaiting_token = false;  // in tokenReady(): the engine's wake cancels the timer
};

}  // namespace kvgate::sim
