// The HTTP/2 bridge: requests read as the HTTP/1.1 text the request path parses, responses as
// HTTP/2 fields. Expected values are written out by hand from RFC 9113 §8.3 and §8.2.3.
#include "proxy/h2/bridge.h"

#include <gtest/gtest.h>

#include "http/parser.h"
#include "proxy/client_side.h"

namespace kvgate::proxy::h2 {
namespace {

std::string build(const std::vector<std::pair<std::string, std::string>>& fields, size_t body,
                  RequestHeadBuilder* out = nullptr, size_t max = 16384) {
  RequestHeadBuilder b(max);
  for (const auto& [n, v] : fields) b.add(n, v);
  std::string text;
  const bool ok = b.finish(body, text);
  if (out) *out = b;
  return ok ? text : "ERR " + std::to_string(b.status()) + " " + b.error();
}

// A response head as fields (client_side.h): names lower-cased, values as they are, in order.
TEST(HeadFields, KeepsOrderAndLowerCasesNames) {
  HeadFields h;
  h.status = 200;
  h.add("Content-Type", "text/event-stream");
  h.add("X-Request-Id", "AbC-1");
  h.add("x-empty", "");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h.name(0), "content-type");
  EXPECT_EQ(h.value(0), "text/event-stream");
  EXPECT_EQ(h.name(1), "x-request-id");
  EXPECT_EQ(h.value(1), "AbC-1");
  EXPECT_EQ(h.name(2), "x-empty");
  EXPECT_EQ(h.value(2), "");
  h.clear();
  EXPECT_EQ(h.size(), 0u);
  EXPECT_EQ(h.status, 0);
  h.add("A", "b");
  EXPECT_EQ(h.name(0), "a");
  h.release();
  EXPECT_EQ(h.size(), 0u);
}

TEST(H2Bridge, RequestLineHostAndLength) {
  const std::string t = build({{":method", "POST"},
                               {":scheme", "http"},
                               {":authority", "gw.example:8080"},
                               {":path", "/v1/chat/completions?x=1"},
                               {"content-type", "application/json"},
                               {"content-length", "999"},  // replaced by the real length
                               {"x-api-key", "k1"}},
                              42);
  EXPECT_EQ(t,
            "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: gw.example:8080\r\n"
            "content-type: application/json\r\nx-api-key: k1\r\ncontent-length: 42\r\n\r\n");
  // What the request path reads from it.
  http::RequestHead h;
  http::ParseError e;
  ASSERT_EQ(http::parseRequestHead(t.data(), t.size(), 16384, h, e), static_cast<int>(t.size()));
  EXPECT_EQ(h.method, "POST");
  EXPECT_EQ(h.target, "/v1/chat/completions?x=1");
  EXPECT_EQ(h.host, "gw.example:8080");
  EXPECT_EQ(h.content_length, 42u);
  EXPECT_EQ(h.get("X-Api-Key"), "k1");
}

TEST(H2Bridge, GetHasNoLengthAndCookiesJoin) {
  EXPECT_EQ(build({{":method", "GET"},
                   {":scheme", "http"},
                   {":authority", "a"},
                   {":path", "/v1/models"},
                   {"cookie", "a=1"},
                   {"accept", "*/*"},
                   {"cookie", "b=2"}},
                  0),
            "GET /v1/models HTTP/1.1\r\nhost: a\r\naccept: */*\r\ncookie: a=1; b=2\r\n\r\n");
  // A POST with no body still states its length (the engine must not wait for one).
  EXPECT_EQ(build({{":method", "POST"}, {":authority", "a"}, {":path", "/x"}}, 0),
            "POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\n\r\n");
}

TEST(H2Bridge, HostFieldMustAgreeWithAuthority) {
  // Same value: kept once (as the client's host field).
  EXPECT_EQ(build({{":method", "GET"}, {":authority", "a"}, {":path", "/"}, {"host", "a"}}, 0),
            "GET / HTTP/1.1\r\nhost: a\r\n\r\n");
  // Different: routing must not read one and the engine the other.
  EXPECT_EQ(build({{":method", "GET"}, {":authority", "a"}, {":path", "/"}, {"host", "b"}}, 0),
            "ERR 400 host field differs from :authority");
  EXPECT_EQ(build({{":method", "GET"}, {":path", "/"}, {"host", "a"}, {"host", "a"}}, 0),
            "ERR 400 more than one host field");
  // Host alone (no :authority) is allowed.
  EXPECT_EQ(build({{":method", "GET"}, {":path", "/"}, {"host", "h"}}, 0),
            "GET / HTTP/1.1\r\nhost: h\r\n\r\n");
  EXPECT_EQ(build({{":method", "GET"}, {":path", "/"}}, 0), "ERR 400 missing :authority");
}

TEST(H2Bridge, RefusalsAndDroppedFields) {
  EXPECT_EQ(build({{":method", "CONNECT"}, {":authority", "a:443"}}, 0),
            "ERR 501 CONNECT is not served");
  EXPECT_EQ(build({{":method", "GET"}, {":authority", "a"}}, 0),
            "ERR 400 missing :method or :path");
  // expect and te mean nothing once the whole body is here.
  EXPECT_EQ(build({{":method", "POST"},
                   {":authority", "a"},
                   {":path", "/"},
                   {"expect", "100-continue"},
                   {"te", "trailers"}},
                  3),
            "POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\n");
}

TEST(H2Bridge, HeadBound) {
  // 40 fields of 40 bytes ("x-fNN: " + 32 bytes + CRLF) against a 1,024-byte bound.
  std::vector<std::pair<std::string, std::string>> f = {
      {":method", "GET"}, {":authority", "a"}, {":path", "/"}};
  for (int i = 0; i < 40; ++i) f.emplace_back("x-f" + std::to_string(10 + i), std::string(32, 'v'));
  EXPECT_EQ(build(f, 0, nullptr, 1024), "ERR 431 request header fields too large");
  EXPECT_NE(build(f, 0, nullptr, 4096).substr(0, 3), "ERR");
}

// The engine side (backend_protocol http2): the request path's HTTP/1.1 head for the engine as
// HTTP/2 fields (RFC 9113 §8.3.1: pseudo-headers first; §8.2.2: no connection-specific fields).
TEST(H2Bridge, UpstreamRequestFields) {
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nConnection: keep-alive, x-hop\r\n"
      "Content-Type: application/json\r\nX-Hop: 1\r\nTE: trailers\r\nKeep-Alive: timeout=5\r\n"
      "X-Request-Id: r1\r\nContent-Length: 2\r\n\r\n";
  std::vector<Field> f;
  std::string err;
  ASSERT_TRUE(requestFields(head, "http", f, err)) << err;
  std::vector<std::pair<std::string, std::string>> got;
  for (const auto& x : f) got.emplace_back(x.name, x.value);
  const std::vector<std::pair<std::string, std::string>> want = {
      {":method", "POST"},
      {":scheme", "http"},
      {":authority", "127.0.0.1:8000"},
      {":path", "/v1/completions"},
      {"content-type", "application/json"},
      {"x-request-id", "r1"},
      {"content-length", "2"}};
  EXPECT_EQ(got, want);
  // No Host (HTTP/2 needs :authority) and text that is no request head are refused.
  EXPECT_FALSE(requestFields("GET / HTTP/1.0\r\n\r\n", "http", f, err));
  EXPECT_FALSE(requestFields("garbage\r\n\r\n", "https", f, err));
  ASSERT_TRUE(requestFields("GET /x HTTP/1.1\r\nHost: h\r\n\r\n", "https", f, err));
  EXPECT_EQ(f[1].value, "https");
  // Absolute form: :authority and :path from the URI (RFC 9113 §8.3.1), not the whole URI.
  ASSERT_TRUE(requestFields("GET http://eng:8000/v1/models?x=1 HTTP/1.1\r\nHost: other\r\n\r\n",
                            "http", f, err));
  EXPECT_EQ(f[2].value, "eng:8000");
  EXPECT_EQ(f[3].value, "/v1/models?x=1");
  ASSERT_TRUE(requestFields("GET HTTPS://eng HTTP/1.1\r\n\r\n", "https", f, err));
  EXPECT_EQ(f[2].value, "eng");
  EXPECT_EQ(f[3].value, "/");
  // More fields than the strict parser takes at once (its 100): all go out.
  std::string many = "POST / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 0; i < 150; ++i)
    many += "x-f" + std::to_string(i) + ": " + std::to_string(i) + "\r\n";
  ASSERT_TRUE(requestFields(many + "\r\n", "http", f, err)) << err;
  EXPECT_EQ(f.size(), 4u + 150u);
  EXPECT_EQ(f.back().name, "x-f149");
  EXPECT_EQ(f.back().value, "149");
  EXPECT_FALSE(requestFields("POST / HTTP/1.1\r\nHost: h\r\nbroken\r\n\r\n", "http", f, err));
  EXPECT_TRUE(sensitiveField("authorization"));
  EXPECT_TRUE(sensitiveField("x-api-key"));
  EXPECT_TRUE(sensitiveField("cookie"));
  EXPECT_FALSE(sensitiveField("content-type"));
}

// The engine's response HEADERS as the HTTP/1.1 head the request path parses: no content-length
// means a chunk-framed body (its end is the stream's end), except where no body is allowed.
TEST(H2Bridge, UpstreamResponseHeadText) {
  ResponseHeadText h(65536);
  h.add(":status", "200");
  h.add("content-type", "text/event-stream");
  std::string out;
  ASSERT_TRUE(h.finish("POST", out));
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            "transfer-encoding: chunked\r\n\r\n");
  EXPECT_TRUE(h.chunked());
  http::ResponseHead rh;
  http::ParseError e;
  ASSERT_EQ(http::parseResponseHead(out.data(), out.size(), 65536, "POST", rh, e),
            static_cast<int>(out.size()));
  EXPECT_EQ(rh.body_kind, http::BodyKind::kChunked);
  EXPECT_TRUE(rh.event_stream);

  h.clear();
  h.add(":status", "404");
  h.add("content-length", "12");
  out.clear();
  ASSERT_TRUE(h.finish("POST", out));
  EXPECT_EQ(out, "HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\n\r\n");
  EXPECT_FALSE(h.chunked());

  for (auto [status, method] :
       {std::pair{"204", "POST"}, {"304", "GET"}, {"200", "HEAD"}, {"100", "POST"}}) {
    h.clear();
    h.add(":status", status);
    out.clear();
    ASSERT_TRUE(h.finish(method, out));
    EXPECT_FALSE(h.chunked()) << status << " " << method;
    EXPECT_EQ(out.find("transfer-encoding"), std::string::npos);
  }
  // Past the bound, or without :status: refused (the leg answers 502).
  ResponseHeadText small(64);
  small.add(":status", "200");
  small.add("x-big", std::string(100, 'a'));
  out.clear();
  EXPECT_FALSE(small.finish("GET", out));
  ResponseHeadText none(64);
  none.add("x", "y");
  EXPECT_FALSE(none.finish("GET", out));
}

// HTTP2-Settings (RFC 7540 §3.2.1): base64url of a SETTINGS payload, no padding. Expected bytes
// worked out by hand: "AAMAAABk" = 00 03 00 00 00 64 (MAX_CONCURRENT_STREAMS = 100).
TEST(H2Bridge, Http2SettingsField) {
  std::string out;
  ASSERT_TRUE(decodeHttp2Settings("AAMAAABk", out));
  EXPECT_EQ(out, std::string("\x00\x03\x00\x00\x00\x64", 6));
  ASSERT_TRUE(decodeHttp2Settings("AAMAAABkAAQAAP__", out));  // + INITIAL_WINDOW_SIZE = 65535
  EXPECT_EQ(out, std::string("\x00\x03\x00\x00\x00\x64\x00\x04\x00\x00\xff\xff", 12));
  ASSERT_TRUE(decodeHttp2Settings("", out));  // no entries: the defaults
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(decodeHttp2Settings("AAMAAABkAA", out));           // 7 bytes: not whole entries
  EXPECT_FALSE(decodeHttp2Settings("AAMAAAB+", out));             // not base64url ('+')
  EXPECT_FALSE(decodeHttp2Settings("AAMAAABk==", out));           // padding is not base64url
  EXPECT_FALSE(decodeHttp2Settings("AAMA AABk", out));            // a space
  EXPECT_FALSE(decodeHttp2Settings(std::string(260, 'A'), out));  // past 32 entries
  // Values HTTP/2 forbids (hand-encoded): ENABLE_PUSH = 2 (00 02 00 00 00 02), MAX_FRAME_SIZE =
  // 100 (00 05 00 00 00 64), INITIAL_WINDOW_SIZE = 2^31 (00 04 80 00 00 00).
  EXPECT_FALSE(decodeHttp2Settings("AAIAAAAC", out));
  EXPECT_FALSE(decodeHttp2Settings("AAUAAABk", out));
  EXPECT_FALSE(decodeHttp2Settings("AASAAAAA", out));
  EXPECT_TRUE(decodeHttp2Settings("AAIAAAAA", out));  // ENABLE_PUSH = 0: fine
  // The bounds themselves: INITIAL_WINDOW_SIZE = 2^31-1 (00 04 7f ff ff ff) and MAX_FRAME_SIZE =
  // 2^24-1 (00 05 00 ff ff ff) are taken, MAX_FRAME_SIZE = 2^24 (00 05 01 00 00 00) is not;
  // NO_RFC7540_PRIORITIES (9) = 2 is not, nor 0 then 1 (it may not change).
  EXPECT_TRUE(decodeHttp2Settings("AAR_____", out));
  EXPECT_TRUE(decodeHttp2Settings("AAUA____", out));
  EXPECT_FALSE(decodeHttp2Settings("AAUBAAAA", out));
  EXPECT_FALSE(decodeHttp2Settings("AAkAAAAC", out));
  EXPECT_FALSE(decodeHttp2Settings("AAkAAAAAAAkAAAAB", out));
  EXPECT_TRUE(decodeHttp2Settings("AAkAAAABAAkAAAAB", out));
}

}  // namespace
}  // namespace kvgate::proxy::h2
