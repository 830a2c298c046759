// Request-target normalization (http/target.h). Expected values are hand-derived from RFC 3986
// (§2.3 unreserved characters, §5.2.4 remove_dot_segments and its worked example) and from what
// an engine's router compares (the fully percent-decoded path).
#include "http/target.h"

#include <gtest/gtest.h>

namespace kvgate::http {
namespace {

struct Case {
  const char* in;
  const char* forward;
  const char* match;
};

TEST(Target, CanonicalTargetsNeedNoRewrite) {
  for (const char* t : {"/", "/v1/chat/completions", "/v1/models?x=%2F&y=..", "/a.b/c..d/.e",
                        "/v1/chat/completions?q=//x"})
    EXPECT_TRUE(isCanonicalTarget(t)) << t;
  for (const char* t : {"/v1/%63hat", "//v1", "/v1//chat", "/v1/./chat", "/v1/../v1/chat", "/v1/.",
                        "/v1/..", "*", "http://h/v1", "", "/v1/chat#x", "/v1?x#y"})
    EXPECT_FALSE(isCanonicalTarget(t)) << t;
}

TEST(Target, NormalizesAsTheEngineReads) {
  const Case cases[] = {
      // Unreserved escapes decoded (upper- and lower-case hex).
      {"/v1/%63hat/completions", "/v1/chat/completions", "/v1/chat/completions"},
      {"/v1/%63%68%61%74/completions?stream=1", "/v1/chat/completions?stream=1",
       "/v1/chat/completions"},
      {"/v1/%7Euser/%2d%2E%5f", "/v1/~user/-._", "/v1/~user/-._"},
      // Reserved or non-ASCII escapes kept (hex upper-cased); the match path decodes them.
      {"/v1/a%3ab", "/v1/a%3Ab", "/v1/a:b"},
      {"/v1/a%20b%25", "/v1/a%20b%25", "/v1/a b%"},
      {"/v1/%c3%a9", "/v1/%C3%A9", "/v1/\xc3\xa9"},
      // Merged slashes.
      {"//v1///chat//completions", "/v1/chat/completions", "/v1/chat/completions"},
      // Dot segments, literal and encoded (RFC 3986 §5.2.4's example: /a/b/c/./../../g -> /a/g).
      {"/a/b/c/./../../g", "/a/g", "/a/g"},
      {"/v1/x/../chat/completions", "/v1/chat/completions", "/v1/chat/completions"},
      {"/v1/x/%2E%2E/chat", "/v1/chat", "/v1/chat"},
      {"/v1/x/%2e./chat", "/v1/chat", "/v1/chat"},
      {"/../../v1/chat", "/v1/chat", "/v1/chat"},
      {"/v1/chat/.", "/v1/chat/", "/v1/chat/"},
      {"/v1/chat/..", "/v1/", "/v1/"},
      {"/..", "/", "/"},
      {"/v1/./chat/./", "/v1/chat/", "/v1/chat/"},
      // Dots inside a segment are not dot segments.
      {"/v1//a..b/.c", "/v1/a..b/.c", "/v1/a..b/.c"},
      // The query is forwarded as given, even with escapes and dot segments.
      {"/v1/%63hat?a=%2F&b=../x", "/v1/chat?a=%2F&b=../x", "/v1/chat"},
  };
  for (const auto& c : cases) {
    NormalizedTarget out;
    EXPECT_EQ(normalizeTarget(c.in, out), "") << c.in;
    EXPECT_EQ(out.forward, c.forward) << c.in;
    EXPECT_EQ(out.match, c.match) << c.in;
    // Idempotent: the rewritten target is canonical, or normalizes to itself.
    NormalizedTarget again;
    EXPECT_EQ(normalizeTarget(out.forward, again), "") << c.in;
    EXPECT_EQ(again.forward, out.forward) << c.in;
  }
}

TEST(Target, RefusesWhatCannotBeNormalizedSafely) {
  for (const char* t :
       {"/v1%2Fchat/completions",  // an encoded slash would become a separator at the engine
        "/v1%2fchat",
        "/v1/%5Cchat",
        "/v1/%5c",
        "/v1/%00x",
        "/v1/%0a",
        "/v1/%7F",  // encoded control bytes
        "/v1/%",
        "/v1/%4",
        "/v1/%G1",
        "/v1/%1G",
        "/v1/%%31",  // malformed escapes
        "*",
        "http://kvgate.test/v1/chat",
        "v1/chat",
        "",
        "/v1/chat/completions#x",
        "/v1/%63hat#",
        "/x/..#f",
        "/v1?q=#"}) {
    NormalizedTarget out;
    EXPECT_NE(normalizeTarget(t, out), "") << t;
  }
}

}  // namespace
}  // namespace kvgate::http
