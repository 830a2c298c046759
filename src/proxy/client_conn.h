// ClientConn: one client connection of the mode-4 fullproxy (internal to src/proxy). The request
// path is in connection.cc, the response relay in relay.cc; see connection.cc for the phases.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/parser.h"
#include "proxy/buffer.h"
#include "proxy/worker.h"
#include "routing/prefix_key.h"

namespace kvgate::proxy {

using Clock = std::chrono::steady_clock;
constexpr size_t kReadChunk = 16 * 1024;

// An OpenAI-style error body: {"error":{"message","type","param","code"}}.
std::string openAiError(int status, std::string_view code, std::string_view message,
                        std::string_view param = {});

class ClientConn : public std::enable_shared_from_this<ClientConn> {
 public:
  ClientConn(Worker& w, std::shared_ptr<Listener> l, tcp::socket s)
      : w_(w),
        l_(std::move(l)),
        client_(std::move(s)),
        upstream_(w.io),
        deadline_(client_.get_executor()) {}

  asio::awaitable<void> run();

 private:
  enum class Phase { kIdle, kHead, kBody, kConnect, kAwaitResponse, kRelay, kStream };

  struct Outcome {
    int status = 0;
    uint64_t bytes = 0;
    const std::string* endpoint = nullptr;  // label of the chosen endpoint (owned by the route)
    const char* key = "";                   // which key the selector used
    bool spilled = false;
    const Route* route = nullptr;  // set once the request's rule is known
    int ep_index = -1;             // set once an endpoint is chosen
    double ttfb_ms = -1;           // first response byte to the client (stream: first event)
  };

  void onDeadline();
  asio::awaitable<bool> readMore(Buffer& b, tcp::socket& s);
  asio::awaitable<bool> readUpstream();
  void countResponse(int status);
  void logAccess(std::string_view request_id, std::string_view model);
  asio::awaitable<void> sendError(int status, std::string_view code, std::string_view msg,
                                  std::string_view param = {}, bool close = false);
  asio::awaitable<bool> writeClient(std::string_view a, std::string_view b = {});
  asio::awaitable<bool> proxyRequest(const http::RequestHead& head, std::string_view body,
                                     const Route& route, std::string_view request_id);
  asio::awaitable<bool> relayResponse(const http::ResponseHead& rh, const Route& route,
                                      std::string_view request_id, bool head_request);
  void startWatch();
  asio::awaitable<void> stopWatch();
  asio::awaitable<void> watchClient(std::shared_ptr<ClientConn> self, uint64_t gen);
  void closeUpstream() {
    error_code ec;
    upstream_.close(ec);
  }
  void closeClient() {
    error_code ec;
    client_.shutdown(tcp::socket::shutdown_both, ec);
    client_.close(ec);
  }

  Worker& w_;
  std::shared_ptr<Listener> l_;
  tcp::socket client_;
  tcp::socket upstream_;
  Deadline deadline_;
  Phase phase_ = Phase::kIdle;
  bool timed_out_ = false;
  Buffer in_;  // client bytes
  Buffer up_;  // upstream bytes
  bool client_keep_alive_ = true;
  int client_minor_ = 1;
  std::chrono::milliseconds idle_timeout_{0};
  // Client-disconnect watcher state.
  bool watching_ = false;
  bool watch_running_ = false;
  bool client_gone_ = false;
  uint64_t watch_gen_ = 0;
  uint64_t source_key_ = 0;  // hash of the client's address (sel 1, persist fallback)
  std::optional<routing::BodyKeys> body_keys_;        // this request's parsed body keys, if parsed
  std::chrono::steady_clock::time_point started_at_;  // when the current request's head arrived
  std::string pipelined_;         // client bytes the watcher read during a response
  bool upstream_waited_ = false;  // the last upstream read had to wait (streaming)
  // Per-request scratch kept across requests so a warm connection allocates nothing for them.
  std::string request_id_;
  std::string up_head_;
  std::string down_head_;
  std::vector<bool> excluded_;
  Outcome outcome_;
};

}  // namespace kvgate::proxy
