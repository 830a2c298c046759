// Pre-tokenizer steps; see pretokenizer.h for the supported set. Split semantics follow HF
// tokenizers: matches are found left to right (leftmost-first), then combined with the gaps
// between them according to the behavior (Removed, Isolated, MergedWithPrevious,
// MergedWithNext, Contiguous), optionally inverted. Each step applies to each piece separately,
// so a regex never sees across a piece boundary.
#include "tokenizer/pretokenizer.h"

#include "tokenizer/split_patterns.h"
#include "tokenizer/split_regex.h"
#include "common/utf8.h"

namespace kvgate::tok {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizer::Step {
  enum Kind { kRegex, kString, kByteLevel, kMetaspace, kDigits } kind = kRegex;
  SplitMatcher matcher = nullptr;
  std::shared_ptr<const OnigRegex> onig;  // kRegex without a hand-written matcher
  std::string literal;                    // kString pattern; kMetaspace replacement
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;   // kByteLevel
  bool use_regex = false;          // kByteLevel
  std::string prepend_scheme;      // kMetaspace: always | first | never
  bool meta_split = true;          // kMetaspace
  bool individual_digits = false;  // kDigits
};

namespace {

using Step = PreTokenizer::Step;

Result<Behavior> parseBehavior(const nlohmann::json& j) {
  std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return fail(400, "pre_tokenizer", "unsupported Split behavior '" + b + "'");
}

Result<void> parseStep(const nlohmann::json& j, std::vector<std::shared_ptr<const Step>>& out) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    return fail(400, "pre_tokenizer", "pre_tokenizer entry without a type");
  std::string type = j["type"];
  auto step = std::make_shared<Step>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return fail(400, "pre_tokenizer", "Sequence without pretokenizers");
    for (const auto& sub : j["pretokenizers"]) {
      auto r = parseStep(sub, out);
      if (!r) return r;
    }
    return {};
  }
  if (type == "Split") {
    const auto& pat = j.value("pattern", nlohmann::json());
    auto beh = parseBehavior(j.value("behavior", nlohmann::json()));
    if (!beh) return tl::unexpected(beh.error());
    step->behavior = *beh;
    step->invert = j.value("invert", false);
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      step->kind = Step::kRegex;
      step->matcher = knownSplitMatcher(pat["Regex"].get<std::string>());
      if (!step->matcher) {  // not a known model pattern: Oniguruma, as the reference
        auto re = OnigRegex::compile(pat["Regex"].get<std::string>());
        if (!re) return tl::unexpected(re.error());
        step->onig = std::move(*re);
      }
    } else if (pat.contains("String") && pat["String"].is_string() &&
               !pat["String"].get<std::string>().empty()) {
      step->kind = Step::kString;
      step->literal = pat["String"];
    } else {
      return fail(400, "pre_tokenizer", "Split needs a non-empty String or Regex pattern");
    }
  } else if (type == "ByteLevel") {
    step->kind = Step::kByteLevel;
    step->add_prefix_space = j.value("add_prefix_space", true);
    step->use_regex = j.value("use_regex", true);
  } else if (type == "Metaspace") {
    step->kind = Step::kMetaspace;
    step->literal = j.value("replacement", std::string("\xE2\x96\x81"));
    size_t at = 0;
    std::string fixed;
    if (step->literal.empty() || !repairUtf8(step->literal, &fixed) ||
        (nextCodePoint(step->literal, at), at != step->literal.size()))
      return fail(400, "pre_tokenizer", "Metaspace replacement must be exactly one character");
    step->prepend_scheme = j.value("prepend_scheme", std::string());
    if (step->prepend_scheme.empty())
      step->prepend_scheme = j.value("add_prefix_space", true) ? "always" : "never";
    if (step->prepend_scheme != "always" && step->prepend_scheme != "first" &&
        step->prepend_scheme != "never")
      return fail(400, "pre_tokenizer", "unknown Metaspace prepend_scheme");
    step->meta_split = j.value("split", true);
  } else if (type == "Digits") {
    step->kind = Step::kDigits;
    step->individual_digits = j.value("individual_digits", false);
  } else {
    return fail(400, "pre_tokenizer", "unsupported pre-tokenizer type '" + type + "'");
  }
  out.push_back(std::move(step));
  return {};
}

struct Span {
  size_t b, e;
  bool match;
};

// Combines match/gap spans per behavior (HF SplitDelimiterBehavior) and appends the pieces.
void combine(std::string_view piece, std::vector<Span>& spans, Behavior beh, bool invert,
             std::vector<std::string_view>& out) {
  if (invert)
    for (auto& s : spans) s.match = !s.match;
  auto emit = [&](size_t b, size_t e) {
    if (e > b) out.push_back(piece.substr(b, e - b));
  };
  switch (beh) {
    case Behavior::kIsolated:
      for (auto& s : spans) emit(s.b, s.e);
      break;
    case Behavior::kRemoved:
      for (auto& s : spans)
        if (!s.match) emit(s.b, s.e);
      break;
    case Behavior::kContiguous: {
      size_t i = 0;
      while (i < spans.size()) {
        size_t j = i + 1;  // HF: runs of spans with the same match flag (after invert) merge
        while (j < spans.size() && spans[j].match == spans[i].match) ++j;
        emit(spans[i].b, spans[j - 1].e);
        i = j;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      std::vector<std::pair<size_t, size_t>> acc;
      bool prev_match = false;
      for (auto& s : spans) {
        if (s.match && !prev_match && !acc.empty())
          acc.back().second = s.e;
        else
          acc.emplace_back(s.b, s.e);
        prev_match = s.match;
      }
      for (auto& [b, e] : acc) emit(b, e);
      break;
    }
    case Behavior::kMergedWithNext: {
      std::vector<std::pair<size_t, size_t>> acc;
      bool prev_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !prev_match && !acc.empty())
          acc.back().first = s.b;
        else
          acc.emplace_back(s.b, s.e);
        prev_match = s.match;
      }
      for (size_t k = acc.size(); k-- > 0;) emit(acc[k].first, acc[k].second);
      break;
    }
  }
}

thread_local std::vector<Span> tl_spans;

void splitMatcher(std::string_view piece, SplitMatcher m, CpText& t, std::vector<Span>& spans) {
  t.assign(piece);
  size_t n = t.size(), i = 0, gap = 0;
  while (i < n) {
    size_t e = m(t, i, n);
    if (e > i) {
      if (gap < i) spans.push_back({t.off[gap], t.off[i], false});
      spans.push_back({t.off[i], t.off[e], true});
      i = e;
      gap = i;
    } else {
      ++i;
    }
  }
  if (gap < n) spans.push_back({t.off[gap], t.off[n], false});
}

void splitOnig(std::string_view piece, const OnigRegex& re, std::vector<Span>& spans) {
  thread_local std::vector<std::pair<size_t, size_t>> m;
  m.clear();
  re.matches(piece, m);
  size_t pos = 0;
  for (auto [b, e] : m) {
    if (b > pos) spans.push_back({pos, b, false});
    spans.push_back({b, e, true});
    pos = e;
  }
  if (pos < piece.size()) spans.push_back({pos, piece.size(), false});
}

void splitLiteral(std::string_view piece, std::string_view lit, std::vector<Span>& spans) {
  size_t pos = 0;
  while (pos < piece.size()) {
    size_t f = piece.find(lit, pos);
    if (f == std::string_view::npos) break;
    if (f > pos) spans.push_back({pos, f, false});
    spans.push_back({f, f + lit.size(), true});
    pos = f + lit.size();
  }
  if (pos < piece.size()) spans.push_back({pos, piece.size(), false});
}

size_t matchNumeric(const CpText& t, size_t i, size_t end) {
  size_t j = i;
  while (j < end && (t.fl[j] & kN)) ++j;
  return j;
}
size_t matchOneNumeric(const CpText& t, size_t i, size_t end) { return (t.fl[i] & kN) ? i + 1 : i; }

void applyStep(const Step& st, std::string_view piece, bool first, PreTokScratch& sc,
               std::vector<std::string_view>& out) {
  std::vector<Span>& spans = tl_spans;
  spans.clear();
  switch (st.kind) {
    case Step::kRegex:
      if (st.onig)
        splitOnig(piece, *st.onig, spans);
      else
        splitMatcher(piece, st.matcher, sc.cps, spans);
      combine(piece, spans, st.behavior, st.invert, out);
      return;
    case Step::kString:
      splitLiteral(piece, st.literal, spans);
      combine(piece, spans, st.behavior, st.invert, out);
      return;
    case Step::kDigits:
      splitMatcher(piece, st.individual_digits ? &matchOneNumeric : &matchNumeric, sc.cps, spans);
      combine(piece, spans, Behavior::kIsolated, false, out);
      return;
    case Step::kByteLevel: {
      std::string_view p = piece;
      if (st.add_prefix_space && (p.empty() || p[0] != ' ')) {
        sc.owned.push_back(" " + std::string(p));
        p = sc.owned.back();
      }
      if (!st.use_regex) {
        out.push_back(p);
        return;
      }
      splitMatcher(p, &matchGpt2, sc.cps, spans);
      combine(p, spans, Behavior::kIsolated, false, out);
      return;
    }
    case Step::kMetaspace: {
      // HF: replace spaces first, then prepend unless the result already starts with it.
      std::string s;
      for (char c : piece) {
        if (c == ' ')
          s += st.literal;
        else
          s += c;
      }
      bool prepend = st.prepend_scheme == "always" || (st.prepend_scheme == "first" && first);
      if (prepend && s.compare(0, st.literal.size(), st.literal) != 0) s.insert(0, st.literal);
      sc.owned.push_back(std::move(s));
      std::string_view p = sc.owned.back();
      if (!st.meta_split) {
        out.push_back(p);
        return;
      }
      splitLiteral(p, st.literal, spans);
      combine(p, spans, Behavior::kMergedWithNext, false, out);
      return;
    }
  }
}

}  // namespace

Result<PreTokenizer> PreTokenizer::fromJson(const nlohmann::json& j) {
  PreTokenizer p;
  if (j.is_null()) return p;
  auto r = parseStep(j, p.steps_);
  if (!r) return tl::unexpected(r.error());
  // HF's ByteLevel maps bytes to GPT-2 characters inside the pre-tokenizer; we map them in the
  // model instead, which is only equivalent when ByteLevel is the last step.
  for (size_t k = 0; k + 1 < p.steps_.size(); ++k)
    if (p.steps_[k]->kind == Step::kByteLevel)
      return fail(400, "pre_tokenizer", "a pre-tokenizer after ByteLevel is not supported");
  return p;
}

void PreTokenizer::split(std::string_view text, bool first, PreTokScratch& sc,
                         std::vector<std::string_view>& out) const {
  if (steps_.empty()) {
    if (!text.empty()) out.push_back(text);
    return;
  }
  sc.a.clear();
  sc.a.push_back(text);
  for (size_t k = 0; k < steps_.size(); ++k) {
    bool last = k + 1 == steps_.size();
    std::vector<std::string_view>& dst = last ? out : sc.b;
    if (!last) dst.clear();
    for (size_t i = 0; i < sc.a.size(); ++i)
      applyStep(*steps_[k], sc.a[i], first && i == 0, sc, dst);
    if (!last) std::swap(sc.a, sc.b);
  }
}

}  // namespace kvgate::tok
