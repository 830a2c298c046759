#include "bench/fleet/stream_client.h"

#include <sys/socket.h>

#include <cerrno>

#include "http/async_fetch.h"
#include "http/chunked.h"
#include "http/parser.h"

namespace kvgate::bench::fleet {

bool SseTokenScanner::isToken(std::string_view ev) {
  // "data: {...}" carrying a choice with text (completions) or content (chat), not the chat
  // role chunk, not the usage chunk ("choices":[]), not [DONE].
  const size_t d = ev.find("data: ");
  if (d == std::string_view::npos) return false;
  std::string_view payload = ev.substr(d + 6);
  if (payload.starts_with("[DONE]")) return false;
  if (payload.find("\"choices\":[{") == std::string_view::npos) return false;
  if (payload.find("\"role\":") != std::string_view::npos) return false;
  return payload.find("\"text\":") != std::string_view::npos ||
         payload.find("\"content\":") != std::string_view::npos;
}

namespace {
// The integer after `"key":` in s, or -1.
int64_t intAfter(std::string_view s, std::string_view key) {
  const size_t k = s.find(key);
  if (k == std::string_view::npos) return -1;
  size_t i = k + key.size();
  while (i < s.size() && (s[i] == ' ' || s[i] == ':')) ++i;
  int64_t v = 0;
  bool any = false;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9' && v < (int64_t{1} << 50)) {
    v = v * 10 + (s[i++] - '0');
    any = true;
  }
  return any ? v : -1;
}
}  // namespace

void SseTokenScanner::usage(std::string_view ev) {
  if (ev.find("\"usage\":{") == std::string_view::npos) return;
  const int64_t p = intAfter(ev, "\"prompt_tokens\"");
  const int64_t c = intAfter(ev, "\"cached_tokens\"");
  if (p >= 0) prompt_tokens_ = p;
  if (c >= 0) cached_tokens_ = c;
}

StreamClient::StreamClient(asio::any_io_executor ex, std::string host, uint16_t port)
    : ex_(std::move(ex)), host_(std::move(host)), port_(port) {}

std::unique_ptr<tcp::socket> StreamClient::takeIdle() {
  const auto now = std::chrono::steady_clock::now();
  while (!idle_.empty()) {
    Idle c = std::move(idle_.back());
    idle_.pop_back();
    if (now - c.since > kMaxIdleAge) continue;  // closed on the way out
    char b;
    const ssize_t n = ::recv(c.sock->native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) continue;  // peer closed
    if (n > 0) continue;  // stray bytes: not a clean connection
    return std::move(c.sock);
  }
  return nullptr;
}

asio::awaitable<StreamResult> StreamClient::post(std::string path, std::string body,
                                                 std::chrono::milliseconds timeout,
                                                 std::chrono::steady_clock::time_point origin,
                                                 const std::function<void()>* on_first_byte) {
  const std::string req =
      "POST " + path + " HTTP/1.1\r\nHost: " + host_ + ":" + std::to_string(port_) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  for (int round = 0; round < 2; ++round) {
    std::unique_ptr<tcp::socket> s = round == 0 ? takeIdle() : nullptr;
    const bool reused = s != nullptr;
    if (!s) {
      s = std::make_unique<tcp::socket>(ex_);
      error_code ec;
      co_await s->async_connect(tcp::endpoint(asio::ip::make_address(host_, ec), port_), useEc(ec));
      if (ec) {
        StreamResult r;
        r.error = "connect: " + ec.message();
        co_return r;
      }
      ++opened_;
    }
    bool retry = false;
    StreamResult r =
        co_await attempt(req, std::move(s), reused, timeout, origin, retry, on_first_byte);
    if (!retry) co_return r;
  }
  StreamResult r;
  r.error = "unreachable";
  co_return r;
}

asio::awaitable<StreamResult> StreamClient::attempt(const std::string& req,
                                                    std::unique_ptr<tcp::socket> s, bool reused,
                                                    std::chrono::milliseconds timeout,
                                                    std::chrono::steady_clock::time_point origin,
                                                    bool& retry,
                                                    const std::function<void()>* on_first_byte) {
  using Clock = std::chrono::steady_clock;
  StreamResult res;
  const auto t0 = origin;
  auto ms = [t0](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - t0).count();
  };
  tcp::socket& sock = *s;
  Deadline d(ex_);
  d.start([&sock] {
    error_code ec;
    sock.close(ec);
  });
  d.expireAfter(timeout);
  error_code ec;
  co_await asio::async_write(sock, asio::buffer(req), useEc(ec));
  if (ec) {
    retry = reused && !d.expired();
    res.error = "send: " + ec.message();
    co_return res;
  }
  std::string buf;
  char tmp[16384];
  http::ResponseHead rh;
  std::string perr;
  const int hn = co_await http::readFinalHead(sock, buf, "POST", rh, ec, perr);
  if (hn < 0) {
    res.error =
        ec ? (d.expired() ? "timed out" : "read: " + ec.message()) : "bad response head: " + perr;
    co_return res;
  }
  res.status = rh.status;
  http::ChunkedScanner chunked;
  SseTokenScanner sse;
  std::string decoded, body;
  bool done = rh.body_kind == http::BodyKind::kNone;
  bool extra = false;  // bytes past the end of the response: the connection is not reusable
  Clock::time_point last{};
  auto onToken = [&] {
    const auto now = Clock::now();
    if (res.tokens == 0)
      res.ttft_ms = ms(now);
    else
      res.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
    ++res.tokens;
  };
  bool first_byte = false;
  auto take = [&](const char* p, size_t n) {
    if (n > 0 && !first_byte) {
      first_byte = true;
      if (on_first_byte && *on_first_byte) (*on_first_byte)();
    }
    if (rh.body_kind == http::BodyKind::kChunked) {
      decoded.clear();
      auto st = chunked.feed(p, n, &decoded);
      if (st.error) return false;
      done = st.done;
      extra = st.consumed < n;
      if (!sse.feed(decoded, onToken)) return false;
      if (body.size() < 4096) body.append(decoded, 0, 4096 - body.size());
    } else {
      const size_t want =
          rh.body_kind == http::BodyKind::kLength ? rh.content_length - body.size() : n;
      const size_t k = std::min(n, want);
      body.append(p, k);
      extra = k < n;
      if (rh.body_kind == http::BodyKind::kLength && body.size() >= rh.content_length) done = true;
      if (!sse.feed(std::string_view(p, k), onToken)) return false;
    }
    return body.size() <= kMaxBody;
  };
  constexpr size_t kKeepBody = 1u << 20;
  if (!done && !take(buf.data() + hn, buf.size() - static_cast<size_t>(hn))) {
    res.error = "bad or oversized body";
    co_return res;
  }
  // A response without a body: any byte after its head is beyond the exchange.
  if (rh.body_kind == http::BodyKind::kNone) extra = buf.size() > static_cast<size_t>(hn);
  while (!done) {
    size_t n = co_await sock.async_read_some(asio::buffer(tmp), useEc(ec));
    if (n > 0 && !take(tmp, n)) {
      res.error = "bad or oversized body";
      co_return res;
    }
    if (ec == asio::error::eof && rh.body_kind == http::BodyKind::kUntilClose && !d.expired()) {
      done = true;
      rh.keep_alive = false;
    } else if (ec) {
      res.error = d.expired() ? "timed out" : "read: " + ec.message();
      co_return res;
    }
  }
  d.stop();
  res.e2e_ms = ms(Clock::now());
  res.prompt_tokens = sse.promptTokens();
  res.cached_tokens = sse.cachedTokens();
  if (res.status != 200) {
    res.error = "status " + std::to_string(res.status) + ": " + body.substr(0, 300);
    co_return res;
  }
  res.ok = true;
  res.body = body.size() > kKeepBody ? body.substr(0, kKeepBody) : std::move(body);
  if (rh.keep_alive && !extra && sock.is_open() && idle_.size() < kMaxIdle)
    idle_.push_back({std::move(s), Clock::now()});
  co_return res;
}

}  // namespace kvgate::bench::fleet
