// The fleet benchmark's HTTP client: streaming completions over keep-alive connections, timing
// each token event as it arrives.
//
// post() sends one `POST path` with a JSON body (a streaming completion), reads the response head
// and the chunked SSE body as it arrives, and records: time to the first token event (TTFT), the
// gap between consecutive token events (inter-token latency), the end-to-end time, the number of
// token events (events whose JSON carries "text" or "content"; [DONE] and the usage chunk are
// not tokens). A non-200 answer, a malformed response, a body over max_body or the timeout is an
// error. The connection goes back to the idle pool only when its exchange ended exactly at the
// end of the response (no bytes beyond it) and the server keeps it alive. A pooled connection is
// reused only when idle under 2 s (below servers' keep-alive timeouts) and not closed by the peer
// (a non-blocking peek); the request is sent again on a fresh connection only when writing it to
// a reused one failed, never once it was written (the server may have acted on it).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "http/asio.h"

namespace kvgate::bench::fleet {

struct StreamResult {
  bool ok = false;
  int status = 0;
  std::string error;
  double ttft_ms = 0;
  double e2e_ms = 0;
  std::vector<double> itl_ms;
  int tokens = 0;
  // From the stream's usage chunk (stream_options.include_usage), -1 when absent.
  int64_t prompt_tokens = -1, cached_tokens = -1;
  std::string body;  // the answer's first 1 MiB (JSON answers; an SSE stream's first 4 KiB)
};

class StreamClient {
 public:
  StreamClient(asio::any_io_executor ex, std::string host, uint16_t port);
  // Times (TTFT, end to end) count from `origin`, the request's scheduled arrival: a late send,
  // a connect and a retry are part of what the user waits for. `on_first_byte` (when given; it
  // must outlive the call) runs once, when the first body byte of the answer arrives.
  asio::awaitable<StreamResult> post(std::string path, std::string body,
                                     std::chrono::milliseconds timeout,
                                     std::chrono::steady_clock::time_point origin,
                                     const std::function<void()>* on_first_byte = nullptr);
  size_t connectionsOpened() const { return opened_; }
  size_t idle() const { return idle_.size(); }

  static constexpr size_t kMaxBody = 64u << 20;
  static constexpr size_t kMaxIdle = 1024;

 private:
  // One attempt; `reused` tells whether the socket came from the pool. `retry` is set only when
  // writing the request to a reused connection failed (the server never had it).
  asio::awaitable<StreamResult> attempt(const std::string& req, std::unique_ptr<tcp::socket> s,
                                        bool reused, std::chrono::milliseconds timeout,
                                        std::chrono::steady_clock::time_point origin, bool& retry,
                                        const std::function<void()>* on_first_byte);
  // An idle pooled connection worth reusing: idle under kMaxIdleAge and not closed by the peer.
  std::unique_ptr<tcp::socket> takeIdle();

  struct Idle {
    std::unique_ptr<tcp::socket> sock;
    std::chrono::steady_clock::time_point since;
  };
  static constexpr std::chrono::seconds kMaxIdleAge{2};  // under servers' keep-alive timeouts

  asio::any_io_executor ex_;
  std::string host_;
  uint16_t port_;
  std::vector<Idle> idle_;
  size_t opened_ = 0;
};

// Scans SSE bytes (the decoded chunked body) for complete events; calls on_token(now) for each
// token event. Holds an incomplete event between calls (bounded by StreamClient::kMaxBody).
class SseTokenScanner {
 public:
  // Returns false when an event grows past the bound.
  template <typename F>
  bool feed(std::string_view bytes, F&& on_token) {
    pending_.append(bytes);
    size_t start = 0;
    for (;;) {
      const size_t end = pending_.find("\n\n", start);
      if (end == std::string::npos) break;
      std::string_view ev(pending_.data() + start, end - start);
      if (isToken(ev))
        on_token();
      else
        usage(ev);
      start = end + 2;
    }
    pending_.erase(0, start);
    return pending_.size() <= StreamClient::kMaxBody;
  }
  static bool isToken(std::string_view ev);
  // The usage chunk's prompt_tokens and prompt_tokens_details.cached_tokens, when one was seen.
  int64_t promptTokens() const { return prompt_tokens_; }
  int64_t cachedTokens() const { return cached_tokens_; }

 private:
  void usage(std::string_view ev);
  std::string pending_;
  int64_t prompt_tokens_ = -1, cached_tokens_ = -1;
};

}  // namespace kvgate::bench::fleet
