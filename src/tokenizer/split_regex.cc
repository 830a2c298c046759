// Oniguruma fallback for Split regexes; see split_regex.h. Kept in its own translation unit:
// oniguruma.h and ICU both define UChar.
#define ONIG_ESCAPE_UCHAR_COLLISION
#include "tokenizer/split_regex.h"

#include <oniguruma.h>

#include <mutex>

namespace kvgate::tok {

namespace {
void initOnig() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding enc[] = {ONIG_ENCODING_UTF8};
    onig_initialize(enc, 1);
  });
}
}  // namespace

Result<std::shared_ptr<const OnigRegex>> OnigRegex::compile(std::string_view pattern) {
  initOnig();
  regex_t* re = nullptr;
  OnigErrorInfo info;
  auto p = reinterpret_cast<const OnigUChar*>(pattern.data());
  int r = onig_new(&re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                   ONIG_SYNTAX_DEFAULT, &info);
  if (r != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &info);
    return fail(400, "pre_tokenizer",
                "invalid Split regex: " + std::string(reinterpret_cast<char*>(msg)));
  }
  std::shared_ptr<OnigRegex> out(new OnigRegex());
  out->re_ = re;
  return std::shared_ptr<const OnigRegex>(std::move(out));
}

OnigRegex::~OnigRegex() {
  if (re_) onig_free(static_cast<regex_t*>(re_));
}

void OnigRegex::matches(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* re = static_cast<regex_t*>(re_);
  OnigRegion* region = onig_region_new();
  auto start = reinterpret_cast<const OnigUChar*>(s.data());
  auto end = start + s.size();
  size_t pos = 0;
  while (pos <= s.size()) {
    int r = onig_search(re, start, end, start + pos, end, region, ONIG_OPTION_NONE);
    if (r < 0) break;  // ONIG_MISMATCH (or an error: treat as no further match)
    auto b = static_cast<size_t>(region->beg[0]), e = static_cast<size_t>(region->end[0]);
    if (e == b) {
      // An empty match splits nothing; continue after the next character (UTF-8 aware).
      size_t next = b + 1;
      while (next < s.size() && (static_cast<unsigned char>(s[next]) & 0xC0) == 0x80) ++next;
      pos = next;
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
  }
  onig_region_free(region, 1);
}

}  // namespace kvgate::tok
