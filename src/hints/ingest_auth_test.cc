// The index's ingest policy (hints/ingest_auth.h): expected verdicts from its stated rules.
#include "hints/ingest_auth.h"

#include <gtest/gtest.h>

namespace kvgate::hints {
namespace {

using V = IngestAuth::Verdict;

TEST(IngestAuth, LoopbackOnlyByDefault) {
  IngestAuth a;
  for (const char* p : {"ipv4:127.0.0.1:5000", "ipv4:127.3.2.1:1", "ipv6:[::1]:5000",
                        "ipv6:%5B::1%5D:5000", "ipv6:[::ffff:127.0.0.1]:5000",
                        "ipv6:%5B::ffff:127.0.0.1%5D:5000", "unix:/run/kvgate.sock"})
    EXPECT_EQ(a.check("", p), V::kOk) << p;
  for (const char* p : {"ipv4:198.18.0.2:5000", "ipv4:10.0.0.1:1", "ipv6:[::2]:1",
                        "ipv6:[fe80::1]:1", "ipv4:128.0.0.1:1", "ipv6:[::ffff:10.0.0.1]:1", "",
                        "ipv4:127.db.example:1", "ipv6:%5B::2%5D:1", "ipv4:1270.0.0.1:1"})
    EXPECT_EQ(a.check("", p), V::kNotLoopback) << p;
  a.insecure = true;
  EXPECT_EQ(a.check("", "ipv4:198.18.0.2:5000"), V::kOk);
  a.insecure = false;
  a.client_certs = true;  // the transport verified the client
  EXPECT_EQ(a.check("", "ipv4:198.18.0.2:5000"), V::kOk);
}

TEST(IngestAuth, TokensAreRequiredEverywhereOnceConfigured) {
  IngestAuth a({"s3cret-one-0123456789", "s3cret-two-0123456789"});
  a.insecure = true;  // a token file wins: even loopback and --ingest-insecure need it
  for (const char* p : {"ipv4:127.0.0.1:1", "ipv4:198.18.0.2:1"}) {
    EXPECT_EQ(a.check("Bearer s3cret-one-0123456789", p), V::kOk);
    EXPECT_EQ(a.check("Bearer s3cret-two-0123456789", p), V::kOk);
    for (const char* bad :
         {"", "Bearer ", "Bearer s3cret-one-012345678", "Bearer s3cret-one-0123456789 ",
          "bearer s3cret-one-0123456789", "s3cret-one-0123456789", "Basic s3cret-one-0123456789",
          "Bearer s3cret-one-0123456789x"})
      EXPECT_EQ(a.check(bad, p), V::kUnauthenticated) << bad;
  }
}

}  // namespace
}  // namespace kvgate::hints
