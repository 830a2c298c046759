// Normalizer steps; see normalizer.h. ICU lives only in this translation unit (its UChar clashes
// with Oniguruma's).
#include "tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uniset.h>
#include <unicode/unistr.h>

#include <memory>

namespace kvgate::tok {
namespace {

Result<void> parse(const nlohmann::json& j, std::vector<Normalizer::Step>& out) {
  using S = Normalizer::Step;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return fail(400, "normalizer", "normalizer entry without a type");
  std::string t = j["type"];
  if (t == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      return fail(400, "normalizer", "Sequence without normalizers");
    for (const auto& s : j["normalizers"]) {
      auto r = parse(s, out);
      if (!r) return r;
    }
    return {};
  }
  if (t == "NFC")
    out.push_back({S::kNfc, "", ""});
  else if (t == "NFD")
    out.push_back({S::kNfd, "", ""});
  else if (t == "NFKC")
    out.push_back({S::kNfkc, "", ""});
  else if (t == "NFKD")
    out.push_back({S::kNfkd, "", ""});
  else if (t == "Prepend") {
    if (!j.contains("prepend") || !j["prepend"].is_string())
      return fail(400, "normalizer", "Prepend without a string 'prepend'");
    out.push_back({S::kPrepend, j["prepend"], ""});
  } else if (t == "Replace") {
    const auto& p = j.value("pattern", nlohmann::json());
    if (!p.contains("String") || !p["String"].is_string() ||
        p["String"].get<std::string>().empty() || !j.contains("content") ||
        !j["content"].is_string())
      return fail(400, "normalizer",
                  "Replace supports only a non-empty String pattern and a string content");
    out.push_back({S::kReplace, p["String"], j["content"]});
  } else {
    return fail(400, "normalizer", "unsupported normalizer type '" + t + "'");
  }
  return {};
}

struct ExcludedRun {
  UChar32 first, last;
};
const ExcludedRun kNfcExcluded[] = {
#include "tokenizer/nfc_exclusions.inc"
};

// The reference normalizes with an older Unicode version than ICU: characters it does not know
// (generated list, scripts/gen_nfc_exclusions.mjs) are left alone via a FilteredNormalizer2.
struct Forms {
  icu::UnicodeSet known;
  std::unique_ptr<icu::FilteredNormalizer2> nfc, nfd, nfkc, nfkd;
  Forms() {
    known.add(0, 0x10FFFF);
    for (const auto& r : kNfcExcluded) known.remove(r.first, r.last);
    known.freeze();
    UErrorCode e = U_ZERO_ERROR;
    nfc = std::make_unique<icu::FilteredNormalizer2>(*icu::Normalizer2::getNFCInstance(e), known);
    nfd = std::make_unique<icu::FilteredNormalizer2>(*icu::Normalizer2::getNFDInstance(e), known);
    nfkc = std::make_unique<icu::FilteredNormalizer2>(*icu::Normalizer2::getNFKCInstance(e), known);
    nfkd = std::make_unique<icu::FilteredNormalizer2>(*icu::Normalizer2::getNFKDInstance(e), known);
  }
};

const icu::Normalizer2* icuForm(Normalizer::Step::Kind k) {
  static const Forms forms;
  switch (k) {
    case Normalizer::Step::kNfc:
      return forms.nfc.get();
    case Normalizer::Step::kNfd:
      return forms.nfd.get();
    case Normalizer::Step::kNfkc:
      return forms.nfkc.get();
    default:
      return forms.nfkd.get();
  }
}

bool isAscii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

void unicodeForm(Normalizer::Step::Kind k, std::string& s) {
  if (isAscii(s)) return;
  const icu::Normalizer2* n = icuForm(k);
  UErrorCode e = U_ZERO_ERROR;
  icu::StringPiece sp(s.data(), static_cast<int32_t>(s.size()));
  if (n->isNormalizedUTF8(sp, e) && U_SUCCESS(e)) return;
  e = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, sp, sink, nullptr, e);
  if (U_SUCCESS(e)) s = std::move(out);
}

}  // namespace

Result<Normalizer> Normalizer::fromJson(const nlohmann::json& j) {
  Normalizer n;
  if (j.is_null()) return n;
  auto r = parse(j, n.steps_);
  if (!r) return tl::unexpected(r.error());
  return n;
}

void Normalizer::apply(std::string_view in, std::string& out) const {
  out.assign(in);
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Step::kPrepend:
        if (!out.empty()) out.insert(0, st.a);
        break;
      case Step::kReplace: {
        if (out.find(st.a) == std::string::npos) break;
        std::string r;
        r.reserve(out.size() + out.size() / 2);
        size_t pos = 0;
        for (;;) {
          size_t f = out.find(st.a, pos);
          if (f == std::string::npos) break;
          r.append(out, pos, f - pos);
          r += st.b;
          pos = f + st.a.size();
        }
        r.append(out, pos, std::string::npos);
        out = std::move(r);
        break;
      }
      default:
        unicodeForm(st.kind, out);
    }
  }
}

}  // namespace kvgate::tok
