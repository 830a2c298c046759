#include "proxy/request_info.h"

#include <gtest/gtest.h>

namespace kvgate::proxy {
namespace {

TEST(ExtractModel, ReadsTopLevelModel) {
  std::string m;
  EXPECT_EQ(extractModel(R"({"messages":[{"role":"user","content":"hi"}],"model":"llama-3"})", m),
            BodyParse::kOk);
  EXPECT_EQ(m, "llama-3");
  m.clear();
  EXPECT_EQ(extractModel(R"({"model":"a\u00e9b"})", m), BodyParse::kOk);
  EXPECT_EQ(m,
            "a\xc3\xa9"
            "b");  // escapes decoded
}

TEST(ExtractModel, NestedModelKeysAreNotTheModel) {
  std::string m;
  EXPECT_EQ(extractModel(R"({"tools":[{"model":"x"}],"metadata":{"model":"y"}})", m),
            BodyParse::kNoModel);
}

TEST(ExtractModel, LastDuplicateWinsAsInPython) {
  std::string m;
  EXPECT_EQ(extractModel(R"({"model":"a","model":"b"})", m), BodyParse::kOk);
  EXPECT_EQ(m, "b");
}

TEST(ExtractModel, HostileBodies) {
  std::string m;
  EXPECT_EQ(extractModel("", m), BodyParse::kNotJson);
  EXPECT_EQ(extractModel("not json", m), BodyParse::kNotJson);
  EXPECT_EQ(extractModel("[1,2]", m), BodyParse::kNotJson);
  EXPECT_EQ(extractModel(R"({"model":"a")", m), BodyParse::kNotJson);
  EXPECT_EQ(extractModel(R"({"model":5})", m), BodyParse::kNoModel);
  std::string deep(100000, '[');
  EXPECT_EQ(extractModel("{\"x\":" + deep, m), BodyParse::kNotJson);
  std::string invalid_utf8 = "{\"model\":\"\xff\xfe\"}";
  EXPECT_EQ(extractModel(invalid_utf8, m), BodyParse::kNotJson);
}

}  // namespace
}  // namespace kvgate::proxy
