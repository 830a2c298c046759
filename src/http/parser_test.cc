#include "http/parser.h"

#include <gtest/gtest.h>

#include <string>

namespace kvgate::http {
namespace {

int parseReq(const std::string& s, RequestHead& h, ParseError& e, size_t max = 16384) {
  return parseRequestHead(s.data(), s.size(), max, h, e);
}

TEST(RequestParser, ParsesSimplePostInPlace) {
  std::string s =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: gw:8080\r\nContent-Type: application/json\r\n"
      "Content-Length: 12\r\nX-Model:  llama \r\n\r\n{\"model\":\"x\"}";
  RequestHead h;
  ParseError e;
  int n = parseReq(s, h, e);
  ASSERT_EQ(n, static_cast<int>(s.find("\r\n\r\n") + 4));
  EXPECT_EQ(h.method, "POST");
  EXPECT_EQ(h.target, "/v1/chat/completions");
  EXPECT_EQ(h.version_minor, 1);
  EXPECT_EQ(h.host, "gw:8080");
  EXPECT_EQ(h.body_kind, BodyKind::kLength);
  EXPECT_EQ(h.content_length, 12u);
  EXPECT_EQ(h.get("x-model"), "llama");  // OWS trimmed, case-insensitive lookup
  EXPECT_TRUE(h.keep_alive);
  // Zero-copy: the views point into the input buffer.
  EXPECT_GE(h.method.data(), s.data());
  EXPECT_LT(h.method.data(), s.data() + s.size());
}

TEST(RequestParser, IncompleteHeadNeedsMoreBytes) {
  RequestHead h;
  ParseError e;
  EXPECT_EQ(parseReq("GET / HTTP/1.1\r\nHost: a\r\n", h, e), 0);
}

// An empty read buffer may have no storage at all (a null pointer): nothing yet, and no
// library call on it (memchr(nullptr, c, 0) is undefined behaviour: found by the UBSan leg,
// which this test also runs under).
TEST(RequestParser, AnEmptyBufferWithoutStorageNeedsMoreBytes) {
  RequestHead h;
  ParseError e;
  EXPECT_EQ(parseRequestHead(nullptr, 0, 16384, h, e), 0);
  EXPECT_EQ(parseRequestHead("\r\n", 2, 16384, h, e), 0);
}

TEST(RequestParser, Http10DefaultsToCloseAndKeepAliveHeaderKeepsIt) {
  RequestHead h;
  ParseError e;
  ASSERT_GT(parseReq("GET / HTTP/1.0\r\n\r\n", h, e), 0);
  EXPECT_FALSE(h.keep_alive);
  ASSERT_GT(parseReq("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", h, e), 0);
  EXPECT_TRUE(h.keep_alive);
  ASSERT_GT(parseReq("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", h, e), 0);
  EXPECT_FALSE(h.keep_alive);
}

struct Bad {
  const char* name;
  std::string req;
  int status;
};

void PrintTo(const Bad& b, std::ostream* os) { *os << b.name; }

class Smuggling : public ::testing::TestWithParam<Bad> {};

TEST_P(Smuggling, IsRejected) {
  RequestHead h;
  ParseError e;
  EXPECT_EQ(parseReq(GetParam().req, h, e), -1) << GetParam().name;
  EXPECT_EQ(e.status, GetParam().status) << GetParam().name << ": " << e.reason;
}

INSTANTIATE_TEST_SUITE_P(
    Http, Smuggling,
    ::testing::Values(
        Bad{"cl_and_te",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            400},
        Bad{"te_and_cl",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            400},
        Bad{"two_cl_differ",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", 400},
        Bad{"two_cl_same",
            "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400},
        Bad{"cl_sign", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400},
        Bad{"cl_hex", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n\r\n", 400},
        Bad{"cl_list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 400},
        Bad{"cl_huge", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
            400},
        Bad{"te_gzip_chunked",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        Bad{"te_identity", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
            501},
        Bad{"te_twice",
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
            "chunked\r\n\r\n",
            400},
        Bad{"te_http10", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        Bad{"obs_fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", 400},
        Bad{"space_before_colon", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 5\r\n\r\n", 400},
        Bad{"bad_name_char", "GET / HTTP/1.1\r\nHost: a\r\nX(A): b\r\n\r\n", 400},
        Bad{"empty_name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", 400},
        Bad{"nul_in_value", std::string("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n", 37), 400},
        Bad{"bare_lf_header", "GET / HTTP/1.1\r\nHost: a\nX-A: b\r\n\r\n", 400},
        Bad{"bare_lf_only", "GET / HTTP/1.1\nHost: a\n\n", 400},
        Bad{"missing_host", "GET / HTTP/1.1\r\nX-A: b\r\n\r\n", 400},
        Bad{"two_hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
        Bad{"bad_version", "GET / HTTP/1.2x\r\nHost: a\r\n\r\n", 400},
        Bad{"http2", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
        Bad{"double_space", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        Bad{"ctl_in_target", "GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        Bad{"bad_method", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
        Bad{"bare_cr_request_line", "GET / HTTP/1.1\rXHost: a\r\n\r\n", 400},
        Bad{"del_in_value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x7f\r\n\r\n", 400},
        Bad{"bare_cr_in_value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n", 400}),
    [](const ::testing::TestParamInfo<Bad>& i) { return std::string(i.param.name); });

TEST(RequestParser, OversizedHeadIs431EvenWhenIncomplete) {
  std::string s = "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(20000, 'a');
  RequestHead h;
  ParseError e;
  EXPECT_EQ(parseReq(s, h, e, 16384), -1);
  EXPECT_EQ(e.status, 431);
}

TEST(RequestParser, TooManyHeadersIs431) {
  std::string s = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 150; ++i) s += "X-H" + std::to_string(i) + ": v\r\n";
  s += "\r\n";
  RequestHead h;
  ParseError e;
  EXPECT_EQ(parseReq(s, h, e, 1 << 20), -1);
  EXPECT_EQ(e.status, 431);
}

// Heads keep their first headers inline and move to a heap array past that; every header stays
// readable, at the limit and after the head object is reset and reused for a smaller head.
TEST(RequestParser, ManyHeadersUpToTheLimitStayReadable) {
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (size_t i = 1; i < kMaxHeaders; ++i)  // Host + 99 = exactly kMaxHeaders
    many += "X-H" + std::to_string(i) + ": v" + std::to_string(i) + "\r\n";
  many += "\r\n";
  RequestHead h;
  ParseError e;
  ASSERT_GT(parseReq(many, h, e, 1 << 20), 0);
  ASSERT_EQ(h.num_headers, kMaxHeaders);
  EXPECT_EQ(h.host, "a");
  for (size_t i = 1; i < kMaxHeaders; ++i)
    EXPECT_EQ(h.get("x-h" + std::to_string(i)), "v" + std::to_string(i)) << i;
  RequestHead copy = h;  // a copy reads the same headers
  EXPECT_EQ(copy.get("x-h99"), "v99");
  EXPECT_EQ(copy.get("x-h5"), "v5");
  // The same object reused for a small head (the connection's next request).
  std::string small = "GET /b HTTP/1.1\r\nHost: b\r\nX-One: 1\r\n\r\n";
  ASSERT_GT(parseReq(small, h, e), 0);
  EXPECT_EQ(h.num_headers, 2u);
  EXPECT_EQ(h.get("x-one"), "1");
  EXPECT_EQ(h.get("x-h5"), "");
  // And a small head copied onto one that spilled, then a large one parsed again.
  copy = h;
  EXPECT_EQ(copy.get("x-one"), "1");
  EXPECT_EQ(copy.get("x-h99"), "");
  ASSERT_GT(parseReq(many, copy, e, 1 << 20), 0);
  EXPECT_EQ(copy.get("x-h99"), "v99");
}

TEST(RequestParser, ChunkedAndExpect) {
  RequestHead h;
  ParseError e;
  ASSERT_GT(parseReq("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\nExpect: "
                     "100-continue\r\n\r\n",
                     h, e),
            0);
  EXPECT_EQ(h.body_kind, BodyKind::kChunked);
  EXPECT_TRUE(h.expect_continue);
}

TEST(ResponseParser, FramingRules) {
  ResponseHead r;
  ParseError e;
  std::string s =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  ASSERT_GT(parseResponseHead(s.data(), s.size(), 65536, "POST", r, e), 0);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.event_stream);
  EXPECT_EQ(r.body_kind, BodyKind::kChunked);

  s = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n";
  ASSERT_GT(parseResponseHead(s.data(), s.size(), 65536, "POST", r, e), 0);
  EXPECT_EQ(r.body_kind, BodyKind::kUntilClose);
  EXPECT_FALSE(r.keep_alive);

  s = "HTTP/1.1 204 No Content\r\n\r\n";
  ASSERT_GT(parseResponseHead(s.data(), s.size(), 65536, "POST", r, e), 0);
  EXPECT_EQ(r.body_kind, BodyKind::kNone);

  s = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
  ASSERT_GT(parseResponseHead(s.data(), s.size(), 65536, "HEAD", r, e), 0);
  EXPECT_EQ(r.body_kind, BodyKind::kNone);

  s = "HTTP/1.1 2x0 OK\r\n\r\n";
  EXPECT_EQ(parseResponseHead(s.data(), s.size(), 65536, "GET", r, e), -1);
  EXPECT_EQ(e.status, 502);

  // The reason phrase is relayed: a bare LF in it (a header line smuggled past the relay's
  // filters), a bare CR ending the status line, or another control byte is refused.
  for (std::string bad : {"HTTP/1.1 200 OK\nSet-Cookie: a=b\r\nContent-Length: 0\r\n\r\n",
                          "HTTP/1.1 200 OK\rX-A: b\r\nContent-Length: 0\r\n\r\n",
                          "HTTP/1.1 200 O\x01K\r\nContent-Length: 0\r\n\r\n"}) {
    EXPECT_EQ(parseResponseHead(bad.data(), bad.size(), 65536, "GET", r, e), -1) << bad;
    EXPECT_EQ(e.status, 502);
  }
  s = "HTTP/1.1 200 Fine\tand \xe2\x9c\x93\r\nContent-Length: 0\r\n\r\n";  // HTAB, obs-text
  ASSERT_GT(parseResponseHead(s.data(), s.size(), 65536, "GET", r, e), 0);
  EXPECT_EQ(r.reason, "Fine\tand \xe2\x9c\x93");
}

// The reason given for a control byte in a header value (it reaches the client's error body).
TEST(RequestParser, ControlByteInValueIsNamedAsSuch) {
  RequestHead h;
  ParseError e;
  for (std::string s : {std::string("GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n", 37),
                        std::string("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x01\r\n\r\n")}) {
    EXPECT_EQ(parseRequestHead(s.data(), s.size(), 65536, h, e), -1);
    EXPECT_EQ(e.status, 400);
    EXPECT_STREQ(e.reason, "invalid header value") << s;
  }
}

// iequals against the byte-by-byte definition, for every size up to 17 and the bytes around
// the letters' edges ('@' '[' '`' '{', high-bit look-alikes) at every position.
TEST(HeaderTokens, CaseInsensitiveEqualityAgainstTheDefinition) {
  auto lower = [](unsigned char c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
  const unsigned char edge[] = {'@', 'A', 'Z', '[', '`', 'a', 'z', '{', 0x00, 0x7f, 0x80,
                                0xC0, 0xC1, 0xDA, 0xDB, 0xE0, 0xE1, 0xFA, 0xFF, '-', '0'};
  for (size_t n = 1; n <= 17; ++n)
    for (size_t at = 0; at < n; ++at)
      for (unsigned char x : edge)
        for (unsigned char y : edge) {
          std::string a(n, 'k'), b(n, 'K');
          a[at] = static_cast<char>(x);
          b[at] = static_cast<char>(y);
          const bool want = lower(x) == lower(y);
          ASSERT_EQ(iequals(a, b), want) << n << " " << at << " " << int(x) << " " << int(y);
        }
}

TEST(HeaderTokens, ListMembership) {
  EXPECT_TRUE(headerHasToken("keep-alive, Close", "close"));
  EXPECT_FALSE(headerHasToken("closed", "close"));
  EXPECT_TRUE(isHopByHop("Transfer-Encoding"));
  EXPECT_FALSE(isHopByHop("Content-Type"));
}

}  // namespace
}  // namespace kvgate::http
