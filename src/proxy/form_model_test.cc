// The model field of form bodies (proxy/form_model.h). Expected readings are what Starlette's
// form parser gives (Python's unquote_plus for urlencoded pairs; RFC 7578 parts), by hand.
#include "proxy/form_model.h"

#include <gtest/gtest.h>

namespace kvgate::proxy {
namespace {

constexpr std::string_view kUrl = "application/x-www-form-urlencoded";
constexpr std::string_view kMp = "multipart/form-data; boundary=XyZ";

std::string part(std::string_view disposition, std::string_view value) {
  return "--XyZ\r\nContent-Disposition: " + std::string(disposition) + "\r\n\r\n" +
         std::string(value) + "\r\n";
}

TEST(FormModel, UrlencodedPairs) {
  std::string m;
  EXPECT_EQ(formModel(kUrl, "a=1&model=secret&b=2", m), FormModel::kOne);
  EXPECT_EQ(m, "secret");
  EXPECT_EQ(formModel(kUrl, "mod%65l=s%65cret+x", m), FormModel::kOne);  // escaped name and value
  EXPECT_EQ(m, "secret x");
  EXPECT_EQ(formModel(kUrl, "model=a%zzb", m), FormModel::kOne);  // an invalid escape stays
  EXPECT_EQ(m, "a%zzb");
  EXPECT_EQ(formModel(kUrl, "a=1&b=2", m), FormModel::kNone);
  EXPECT_EQ(formModel("application/x-www-form-urlencoded; charset=utf-8", "model=x", m),
            FormModel::kOne);
  // The third review: a form type in another case (Starlette compares it exactly), a non-ASCII
  // byte Python strips as whitespace: refused, not read as a form or as no form.
  EXPECT_EQ(formModel("Application/X-WWW-Form-Urlencoded; charset=utf-8", "model=x", m),
            FormModel::kAmbiguous);
  EXPECT_EQ(formModel("multipart/form-data\xa0; boundary=XyZ", "model=x", m),
            FormModel::kAmbiguous);
  EXPECT_EQ(formModel("application/json\x85", "{}", m), FormModel::kAmbiguous);
  // Repeated, not valid UTF-8 after decoding, or read differently with ';' as a separator.
  for (std::string_view b : {"model=a&model=b", "model=%ff", "x=1;model=secret", "model=a;b",
                             "model=caf\xc3\xa9"})  // (raw non-ASCII: latin-1 to Starlette)
    EXPECT_EQ(formModel(kUrl, b, m), FormModel::kAmbiguous) << b;
  EXPECT_EQ(formModel(kUrl, "model=a&x=1;y=2", m), FormModel::kOne);  // ';' changes nothing
  EXPECT_EQ(formModel(kUrl, "model=" + std::string(kMaxFormModel + 1, 'm'), m),
            FormModel::kAmbiguous);
}

TEST(FormModel, MultipartParts) {
  std::string m;
  const std::string file = part("form-data; name=\"file\"; filename=\"a.wav\"", "RIFF....");
  std::string body = file + part("form-data; name=\"model\"", "whisper-large") + "--XyZ--\r\n";
  EXPECT_EQ(formModel(kMp, body, m), FormModel::kOne);
  EXPECT_EQ(m, "whisper-large");
  // Quoted boundary, unquoted name, header name case.
  body = "--XyZ\r\ncontent-disposition: form-data; name=model\r\n\r\nm1\r\n--XyZ--";
  EXPECT_EQ(formModel("multipart/form-data; boundary=\"XyZ\"", body, m), FormModel::kOne);
  EXPECT_EQ(m, "m1");
  EXPECT_EQ(formModel("multipart/form-data; boundary=XyZ; charset=UTF-8", body, m),
            FormModel::kOne);
  // The second review's differentials (python-multipart's reading in brackets): all refused.
  for (const std::string& d :
       {std::string("form-data; name=\"zzz\"; name=\"model\""),      // [last wins: model]
        std::string("form-data; name=\"foo\"; name*=utf-8''model"),  // [RFC 2231: model]
        std::string("form-data; name*0=mo; name*1=del"),             // [continuations]
        std::string("form-data; name=<model>"),                      // [<> stripped]
        std::string("form-data; name=model\xa0")}) {                 // [whitespace stripped]
    const std::string b = part(d, "secret") + "--XyZ--\r\n";
    EXPECT_EQ(formModel(kMp, b, m), FormModel::kAmbiguous) << d;
  }
  // The third review's desync: a quote in the disposition type pairs the later quotes
  // differently in Python's parser; a type other than form-data; a token ended by ','; too many
  // parameters (each checked against the others).
  {
    const std::string b = part("form-data; name=model", "A") +
                          part("\"; a=\"; name=model; b=\"; name=x", "B") + "--XyZ--\r\n";
    EXPECT_EQ(formModel(kMp, b, m), FormModel::kAmbiguous);
  }
  EXPECT_EQ(formModel(kMp, part("attachment; name=model", "B") + "--XyZ--", m),
            FormModel::kAmbiguous);
  EXPECT_EQ(formModel(kMp, part("form-data; name=model,x", "B") + "--XyZ--", m),
            FormModel::kAmbiguous);
  {
    std::string many = "form-data; name=q";
    for (int i = 0; i < 20; ++i) many += "; p" + std::to_string(i) + "=1";
    EXPECT_EQ(formModel(kMp, part(many, "B") + "--XyZ--", m), FormModel::kAmbiguous);
  }
  // A ';' inside a quoted value: both readers see the name zzz, not model.
  EXPECT_EQ(formModel(kMp, part("form-data; x=\";name=model;\"; name=\"zzz\"", "s") + "--XyZ--", m),
            FormModel::kNone);
  // A quoted "filename*" inside another parameter does not make the part a file.
  EXPECT_EQ(formModel(kMp, part("form-data; name=\"model\"; x=\"filename*\"", "m2") + "--XyZ--", m),
            FormModel::kOne);
  EXPECT_EQ(m, "m2");
  // Another charset, a boundary given twice or in RFC 2231 form, a preamble, a folded header,
  // a delimiter over 70 bytes: refused.
  EXPECT_EQ(formModel("multipart/form-data; boundary=XyZ; charset=utf-7", body, m),
            FormModel::kAmbiguous);
  EXPECT_EQ(formModel("multipart/form-data; boundary=AAA; boundary=XyZ", body, m),
            FormModel::kAmbiguous);
  EXPECT_EQ(formModel("multipart/form-data; boundary*=''XyZ", body, m), FormModel::kAmbiguous);
  EXPECT_EQ(formModel(kMp, "preamble\r\n" + body, m), FormModel::kAmbiguous);
  EXPECT_EQ(
      formModel(kMp, "--XyZ\r\nContent-Disposition: form-data;\r\n name=model\r\n\r\nx\r\n--XyZ--",
                m),
      FormModel::kAmbiguous);
  EXPECT_EQ(formModel("multipart/form-data; boundary=" + std::string(71, 'b'), body, m),
            FormModel::kAmbiguous);
  // Linear on a hostile body: a long boundary over a body of its first byte.
  const std::string hostile(8 << 20, '-');
  EXPECT_EQ(formModel("multipart/form-data; boundary=" + std::string(69, '-') + "x", hostile, m),
            FormModel::kAmbiguous);
  EXPECT_EQ(formModel(kMp, file + "--XyZ--\r\n", m), FormModel::kNone);
  EXPECT_EQ(formModel(kMp, "--XyZ\r\n\r\nhi\r\n--XyZ--\r\n", m), FormModel::kNone);  // no headers
  // A file part named model is not the field.
  EXPECT_EQ(formModel(kMp, part("form-data; name=\"model\"; filename=\"m\"", "x") + "--XyZ--", m),
            FormModel::kNone);
  // Refused: the field twice, an escaped or percent-encoded name, a malformed body, a missing
  // boundary, two Content-Disposition headers.
  for (const std::string& b :
       {part("form-data; name=\"model\"", "a") + part("form-data; name=\"model\"", "b") + "--XyZ--",
        part("form-data; name=\"mod\\\"el\"", "a") + "--XyZ--",
        part("form-data; name=\"mod%65l\"", "a") + "--XyZ--",
        std::string("--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nno end"),
        std::string("no delimiter at all"),
        std::string("--XyZ\r\nContent-Disposition: form-data; name=\"x\"\r\nContent-Disposition: "
                    "form-data; name=\"model\"\r\n\r\nv\r\n--XyZ--")})
    EXPECT_EQ(formModel(kMp, b, m), FormModel::kAmbiguous) << b;
  EXPECT_EQ(formModel("multipart/form-data", body, m), FormModel::kAmbiguous);  // no boundary
  EXPECT_EQ(formModel("application/json", "{}", m), FormModel::kNotForm);
  EXPECT_EQ(formModel("", "model=x", m), FormModel::kNotForm);
}

}  // namespace
}  // namespace kvgate::proxy
