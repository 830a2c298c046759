// The PostgreSQL connection string the governance store connects with (issue 28 §1.8): a remote
// server without an sslmode gets verify-full; local ones and the operator's own choice are kept.
#include <gtest/gtest.h>

#include <cstdlib>

#include "governance/row_store.h"

namespace kvgate::governance {
namespace {

bool hasVerifyFull(const std::string& ci) {
  return ci.find("sslmode=verify-full") != std::string::npos;
}

TEST(PostgresConninfo, RemoteServersNeedVerifiedTls) {
  ::unsetenv("PGHOST");
  ::unsetenv("PGSSLMODE");
  for (const char* remote :
       {"host=db.example.com dbname=kvgate", "host=198.18.0.5 dbname=kvgate",
        "host=127.db.example dbname=kvgate", "postgresql://kvgate@db.example.com:5432/kvgate",
        "host=localhost,db.example.com", "hostaddr=198.18.0.5 dbname=kvgate",
        "postgres://u@[2001:db8::1]/d"}) {
    auto ci = postgresConninfo(remote);
    ASSERT_TRUE(ci) << remote;
    EXPECT_TRUE(hasVerifyFull(*ci)) << *ci;
  }
  for (const char* local :
       {"dbname=kvgate", "host=/var/run/postgresql dbname=kvgate", "host=localhost dbname=kvgate",
        "host=127.0.0.1 port=5432", "postgresql://u@127.0.0.1:5/d", "host=::1",
        "postgresql:///kvgate?host=/tmp"}) {
    auto ci = postgresConninfo(local);
    ASSERT_TRUE(ci) << local;
    EXPECT_FALSE(hasVerifyFull(*ci)) << *ci;
  }
  // The operator's own sslmode is theirs (a documented choice), in either syntax.
  for (const char* own :
       {"host=db.example.com sslmode=require", "postgresql://u@db.example.com/d?sslmode=disable"}) {
    auto ci = postgresConninfo(own);
    ASSERT_TRUE(ci) << own;
    EXPECT_FALSE(hasVerifyFull(*ci)) << *ci;
  }
  ::setenv("PGSSLMODE", "require", 1);
  EXPECT_FALSE(hasVerifyFull(*postgresConninfo("host=db.example.com")));
  ::unsetenv("PGSSLMODE");
  ::setenv("PGHOST", "db.example.com", 1);
  EXPECT_TRUE(hasVerifyFull(*postgresConninfo("dbname=kvgate")));
  ::unsetenv("PGHOST");
  ::setenv("PGHOSTADDR", "198.18.0.5", 1);
  EXPECT_TRUE(hasVerifyFull(*postgresConninfo("dbname=kvgate")));
  ::unsetenv("PGHOSTADDR");
  // A service file may set its own sslmode: left to it.
  EXPECT_FALSE(hasVerifyFull(*postgresConninfo("service=kvgate")));
  EXPECT_TRUE(hasVerifyFull(*postgresConninfo("service=kvgate host=db.example.com")));
  // Bounds are added; an unparseable string is a 400 naming the flag.
  EXPECT_NE(postgresConninfo("dbname=x")->find("connect_timeout=3"), std::string::npos);
  auto bad = postgresConninfo("host='unterminated");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, 400);
  EXPECT_NE(bad.error().what.find("--state-db"), std::string::npos);
}

}  // namespace
}  // namespace kvgate::governance
