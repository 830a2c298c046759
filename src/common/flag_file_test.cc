// Flags from a file (flag_file.h): the format, its bounds and errors, and --config expansion.
#include "common/flag_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace kvgate {
namespace {

using Args = std::vector<std::string>;

TEST(FlagFile, LinesBecomeArguments) {
  auto a = parseFlagFile(
      "# kvgate serve flags\n"
      "\n"
      "api-listen 127.0.0.1:11111\n"
      "  --workers = 2  \r\n"
      "access-log\n"
      "state-dir \"/var/lib/kvgate state\"\n"
      "models-dir=/usr/share/kvgate/models\n"
      "\tlog-level\twarn\n",
      "f.conf");
  ASSERT_TRUE(a.has_value()) << a.error().what;
  // (one argument a line: a line missing its value cannot take the next flag as one)
  EXPECT_EQ(*a, (Args{"--api-listen=127.0.0.1:11111", "--workers=2", "--access-log",
                      "--state-dir=/var/lib/kvgate state", "--models-dir=/usr/share/kvgate/models",
                      "--log-level=warn"}));
  EXPECT_EQ(*parseFlagFile("state-dir\naccess-log\n", "f"), (Args{"--state-dir", "--access-log"}));
  EXPECT_EQ(*parseFlagFile("", "f"), Args{});
  EXPECT_EQ(*parseFlagFile("# only\n#comments", "f"), Args{});
}

TEST(FlagFile, BadFilesAreRefusedNamingTheLine) {
  for (const char* bad : {"workers 2\n-x 1\n", "workers 2\n--\n", "Workers 2\n", "wo_rkers 2\n",
                          "workers \"2\n", "workers 2\"\n", "= 3\n", "workers 2\nx\xC3\xA9 1\n"}) {
    auto a = parseFlagFile(bad, "f.conf");
    ASSERT_FALSE(a.has_value()) << bad;
    EXPECT_NE(a.error().what.find("f.conf:"), std::string::npos) << a.error().what;
  }
  auto a = parseFlagFile("workers 2\n-x 1\n", "f.conf");
  EXPECT_NE(a.error().what.find("f.conf:2"), std::string::npos) << a.error().what;
  EXPECT_FALSE(parseFlagFile(std::string("workers 2\0", 10), "f").has_value());
  EXPECT_FALSE(parseFlagFile(std::string(5000, 'a') + "\n", "f").has_value());
  EXPECT_FALSE(parseFlagFile(std::string((1 << 20) + 1, '#'), "f").has_value());
  std::string many;
  for (int i = 0; i < 1025; ++i) many += "access-log\n";
  EXPECT_FALSE(parseFlagFile(many, "f").has_value());
}

TEST(FlagFile, ConfigExpandsFirstSoTheCommandLineWins) {
  const std::string path = testing::TempDir() + "kvgate_flag_file_test.conf";
  {
    std::ofstream f(path);
    f << "workers 4\nlog-level warn\n";
  }
  std::string config;
  auto a = expandConfigFlag({"--log-level", "debug", "--config", path, "--access-log"}, &config);
  ASSERT_TRUE(a.has_value()) << a.error().what;
  EXPECT_EQ(config, path);
  EXPECT_EQ(*a, (Args{"--workers=4", "--log-level=warn", "--log-level", "debug", "--access-log"}));
  a = expandConfigFlag({"--config=" + path}, &config);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->size(), 2u);
  // Without --config: the arguments as they are.
  a = expandConfigFlag({"--workers", "1"}, &config);
  EXPECT_EQ(*a, (Args{"--workers", "1"}));
  EXPECT_EQ(config, "");
  // Errors: twice, no file, a missing file, a file naming another.
  EXPECT_FALSE(expandConfigFlag({"--config", path, "--config", path}, &config).has_value());
  EXPECT_FALSE(expandConfigFlag({"--config"}, &config).has_value());
  EXPECT_FALSE(expandConfigFlag({"--config="}, &config).has_value());
  EXPECT_FALSE(expandConfigFlag({"--config", path + ".missing"}, &config).has_value());
  {
    std::ofstream f(path);
    f << "config /etc/other.conf\n";
  }
  EXPECT_FALSE(expandConfigFlag({"--config", path}, &config).has_value());
  // Not a regular file (a directory; a FIFO would block a reload): refused, never read.
  EXPECT_FALSE(expandConfigFlag({"--config", testing::TempDir()}, &config).has_value());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvgate
