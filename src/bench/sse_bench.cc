// `kvgate bench sse`: N concurrent SSE streams against an OpenAI-compatible endpoint, measuring
// per-event relay delay from the simulator's "kvgate_sent_us" stamps (sim --stamp-events).
//
// Each stream POSTs /v1/completions with stream:true and max_tokens E, reads the (chunked) SSE
// body, and for every event that carries "kvgate_sent_us":T records now_us - T (same machine,
// same clock). Streams start spread over --ramp-ms. Prints one JSON line: streams completed,
// errors, events, and delay percentiles in microseconds. One thread, one io_context. --tls: over
// TLS (no certificate verification: a benchmark of the relay, on loopback), one handshake per
// stream.
// Outcomes (for fault runs, docs/reliability.md): completed (a 200 that reached [DONE]),
// truncated (a 200 cut before [DONE]), statuses (non-200 answers by status), connect_failed (no
// connection or no request sent), aborted (--abort-after K: the client closed after K events, a
// disconnect on purpose), and the fewest and most stamped events of a completed stream (equal
// when no acknowledged stream lost an event).
#include "bench/sse_bench.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/net.h"

namespace kvgate::bench {

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t scanStamps(std::string& buf, int64_t now, SseStats& st) {
  static constexpr std::string_view kStamp = "\"kvgate_sent_us\":";
  int64_t stamps = 0;
  size_t pos = 0;
  size_t keep_from = std::string::npos;
  for (;;) {
    size_t at = buf.find(kStamp, pos);
    if (at == std::string::npos) break;
    size_t v = at + kStamp.size();
    size_t end = buf.find_first_not_of("0123456789", v);
    if (end == std::string::npos) {  // number split across reads: keep it for the next one
      keep_from = at;
      break;
    }
    const int64_t sent = std::stoll(buf.substr(v, end - v));
    st.delays_us.push_back(now - sent);
    (sent < st.ramp_end_us ? st.ramp_us : st.steady_us).push_back(now - sent);
    ++stamps;
    pos = end;
  }
  // Drop what was scanned; keep a partial marker (or the last bytes, which may start one).
  if (keep_from == std::string::npos)
    keep_from = std::max(pos, buf.size() > kStamp.size() ? buf.size() - kStamp.size() : 0);
  buf.erase(0, keep_from);
  return stamps;
}

void SseStats::ended(bool done, int status, int64_t stamps) {
  if (done && status == 200) {
    ++completed;
    if (complete_min_events < 0 || stamps < complete_min_events) complete_min_events = stamps;
    complete_max_events = std::max(complete_max_events, stamps);
    return;
  }
  ++errors;
  if (status == 200)
    ++truncated;
  else if (status == 0)
    ++connect_failed;  // connected, but no answer at all
  else
    ++statuses[status];
}

asio::awaitable<error_code> openConnection(const SseOptions& o, int index, tcp::socket& s,
                                           std::unique_ptr<asio::ssl::stream<tcp::socket&>>& tls,
                                           int64_t& setup_from, std::string_view alpn) {
  asio::steady_timer t(s.get_executor());
  t.expires_after(
      std::chrono::microseconds(int64_t{o.ramp_ms} * 1000 * index / std::max(1, o.streams)));
  error_code ec;
  co_await t.async_wait(useEc(ec));
  setup_from = nowUs();
  co_await s.async_connect(tcp::endpoint(asio::ip::make_address(o.host), o.port), useEc(ec));
  if (!ec && o.tls) {
    tls = std::make_unique<asio::ssl::stream<tcp::socket&>>(s, *o.tls);
    if (!alpn.empty())
      SSL_set_alpn_protos(tls->native_handle(), reinterpret_cast<const unsigned char*>(alpn.data()),
                          static_cast<unsigned int>(alpn.size()));
    co_await tls->async_handshake(asio::ssl::stream_base::client, useEc(ec));
  }
  co_return ec;
}

namespace {

using Options = SseOptions;
using Stats = SseStats;

asio::awaitable<void> oneStream(const Options& o, int index, Stats& st) {
  tcp::socket s(co_await asio::this_coro::executor);
  std::unique_ptr<asio::ssl::stream<tcp::socket&>> tls;
  int64_t setup_from = 0;
  error_code ec = co_await openConnection(o, index, s, tls, setup_from);
  if (ec) {
    ++st.errors;
    ++st.connect_failed;
    co_return;
  }
  std::string body = "{\"model\":\"" + o.model + "\",\"prompt\":\"stream " + std::to_string(index) +
                     "\",\"max_tokens\":" + std::to_string(o.events) + ",\"stream\":true}";
  std::string req = "POST /v1/completions HTTP/1.1\r\nHost: " + o.host +
                    "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body;
  if (tls) co_await asio::async_write(*tls, asio::buffer(req), useEc(ec));
  else co_await asio::async_write(s, asio::buffer(req), useEc(ec));
  if (ec) {
    ++st.errors;
    ++st.connect_failed;
    co_return;
  }
  st.setup_us.push_back(nowUs() - setup_from);
  std::string buf;
  char tmp[16384];
  bool done = false;
  int status = 0;  // from the status line
  int64_t stamps = 0;
  for (;;) {
    size_t n = 0;
    if (tls) n = co_await tls->async_read_some(asio::buffer(tmp), useEc(ec));
    else n = co_await s.async_read_some(asio::buffer(tmp), useEc(ec));
    if (ec || n == 0) break;
    int64_t now = nowUs();
    buf.append(tmp, n);
    if (status == 0 && buf.size() >= 12 && buf.compare(0, 5, "HTTP/") == 0)
      status = std::atoi(buf.c_str() + 9);
    if (buf.find("data: [DONE]") != std::string::npos) done = true;
    stamps += scanStamps(buf, now, st);
    if (o.abort_after >= 0 && stamps >= o.abort_after) {  // a client that leaves on purpose
      ++st.aborted;
      co_return;  // (the socket closes with this frame)
    }
  }
  st.ended(done, status, stamps);
}

int64_t pct(std::vector<int64_t>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

int tokenizeBench(int argc, char** argv);
int quotaBench(int argc, char** argv);
int relayMain(int argc, char** argv);
int kvFloodMain(int argc, char** argv);
namespace fleet {
int fleetBench(int argc, char** argv);
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "tokenize") return tokenizeBench(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "fleet") return fleet::fleetBench(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "quota") return quotaBench(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "relay") return relayMain(argc - 1, argv + 1);
  if (argc >= 2 && std::string(argv[1]) == "kvflood") return kvFloodMain(argc - 1, argv + 1);
  if (argc < 2 || std::string(argv[1]) != "sse") {
    std::fprintf(stderr,
                 "usage: kvgate bench sse --target HOST:PORT [--streams N] [--events E] "
                 "[--ramp-ms MS] [--model NAME] [--tls] [--abort-after K] [--h2 K]\n"
                 "Runs N concurrent SSE streams of E events; needs `kvgate sim --stamp-events` "
                 "upstream. Prints one JSON line of results.\n");
    return 2;
  }
  Options o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    std::string v = i + 1 < argc ? argv[i + 1] : "";
    uint64_t x = 0;
    bool ok = true;
    if (a == "--target") {
      auto hp = net::parseHostPort(v);
      ok = hp.has_value();
      if (ok) {
        o.host = hp->host;
        o.port = hp->port;
      }
    } else if (a == "--streams") {
      ok = net::parseUint(v, 100000, x) && x > 0;
      o.streams = static_cast<int>(x);
    } else if (a == "--events") {
      ok = net::parseUint(v, 100000, x) && x > 0;
      o.events = static_cast<int>(x);
    } else if (a == "--ramp-ms") {
      ok = net::parseUint(v, 600000, x);
      o.ramp_ms = static_cast<int>(x);
    } else if (a == "--abort-after") {
      ok = net::parseUint(v, 100000, x);
      o.abort_after = static_cast<int>(x);
    } else if (a == "--h2") {  // HTTP/2 (h2c; with --tls h2 by ALPN), K streams a connection
      // (at most 100: the gateway's default --h2-max-streams; more would queue in the client)
      ok = net::parseUint(v, 100, x) && x > 0;
      o.h2_streams_per_conn = static_cast<int>(x);
    } else if (a == "--model") {
      o.model = v;
    } else if (a == "--tls") {
      o.tls = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
      o.tls->set_verify_mode(asio::ssl::verify_none);
      --i;  // (no value)
    } else {
      std::fprintf(stderr, "kvgate bench sse: unknown flag %s\n", a.c_str());
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "kvgate bench sse: bad value for %s\n", a.c_str());
      return 2;
    }
    ++i;
  }
  if (o.port == 0) {
    std::fprintf(stderr, "kvgate bench sse: --target HOST:PORT is required\n");
    return 2;
  }
  asio::io_context io(1);
  Stats st;
  st.delays_us.reserve(static_cast<size_t>(o.streams) * static_cast<size_t>(o.events));
  st.ramp_end_us = nowUs() + int64_t{o.ramp_ms} * 1000;
  if (o.h2_streams_per_conn > 0) {
    if (o.abort_after >= 0) {
      std::fprintf(stderr, "kvgate bench sse: --abort-after is for HTTP/1.1 streams\n");
      return 2;
    }
    for (int i = 0; i < o.streams; i += o.h2_streams_per_conn)
      asio::co_spawn(io, h2Connection(o, i, std::min(o.h2_streams_per_conn, o.streams - i), st),
                     asio::detached);
  } else {
    for (int i = 0; i < o.streams; ++i) asio::co_spawn(io, oneStream(o, i, st), asio::detached);
  }
  auto t0 = std::chrono::steady_clock::now();
  io.run();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(st.delays_us.begin(), st.delays_us.end());
  std::sort(st.ramp_us.begin(), st.ramp_us.end());
  std::sort(st.steady_us.begin(), st.steady_us.end());
  std::sort(st.setup_us.begin(), st.setup_us.end());
  std::string statuses;
  for (auto [s, n] : st.statuses)
    statuses += (statuses.empty() ? "" : ",") + ("\"" + std::to_string(s) + "\":") + std::to_string(n);
  std::printf(
      "{\"streams\":%d,\"completed\":%d,\"errors\":%d,\"truncated\":%d,\"connect_failed\":%d,"
      "\"aborted\":%d,\"statuses\":{%s},\"complete_events\":{\"min\":%lld,\"max\":%lld},"
      "\"events\":%zu,\"seconds\":%.2f,"
      "\"delay_us\":{\"p50\":%lld,\"p90\":%lld,\"p99\":%lld,\"p999\":%lld,\"max\":%lld},"
      "\"ramp_delay_us\":{\"events\":%zu,\"p99\":%lld},\"steady_delay_us\":{\"events\":%zu,\"p99\":%lld},"
      "\"setup_us\":{\"p50\":%lld,\"p99\":%lld}}\n",
      o.streams, st.completed, st.errors, st.truncated, st.connect_failed, st.aborted,
      statuses.c_str(), static_cast<long long>(st.complete_min_events),
      static_cast<long long>(st.complete_max_events), st.delays_us.size(), secs,
      static_cast<long long>(pct(st.delays_us, 50)), static_cast<long long>(pct(st.delays_us, 90)),
      static_cast<long long>(pct(st.delays_us, 99)),
      static_cast<long long>(pct(st.delays_us, 99.9)),
      static_cast<long long>(st.delays_us.empty() ? 0 : st.delays_us.back()), st.ramp_us.size(),
      static_cast<long long>(pct(st.ramp_us, 99)), st.steady_us.size(),
      static_cast<long long>(pct(st.steady_us, 99)), static_cast<long long>(pct(st.setup_us, 50)),
      static_cast<long long>(pct(st.setup_us, 99)));
  return st.errors == 0 ? 0 : 1;
}

}  // namespace kvgate::bench
