#include "proxy/form_model.h"

#include <cstdint>

#include "common/hex.h"
#include "http/parser.h"

namespace kvgate::proxy {
namespace {

// Python's unquote_plus: '+' is a space, %XY decoded, an invalid escape kept as written.
std::string unquotePlus(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size() && hexDigitValue(s[i + 1]) >= 0 &&
               hexDigitValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hexDigitValue(s[i + 1]) * 16 + hexDigitValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Strict UTF-8 (no overlongs, surrogates or values past U+10FFFF): the engine decodes the
// field's bytes as UTF-8, replacing what is not, so only valid text reads the same on both sides.
bool validUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The media type (lower-case comparison) and the value of parameter `param` (unquoted; "" when
// absent; `bad` when quoted with an escape inside).
std::string_view mediaType(std::string_view ct) { return trim(ct.substr(0, ct.find(';'))); }

std::string_view paramOf(std::string_view header, std::string_view param, bool& bad) {
  size_t pos = header.find(';');
  while (pos != std::string_view::npos) {
    std::string_view rest = header.substr(pos + 1);
    const size_t next = rest.find(';');
    std::string_view item = trim(rest.substr(0, next));
    const size_t eq = item.find('=');
    if (eq != std::string_view::npos && http::iequals(trim(item.substr(0, eq)), param)) {
      std::string_view v = trim(item.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"') {
        // A quoted value: ends at the next quote; an escape or a ';' inside is not read.
        const size_t close = v.find('"', 1);
        if (close == std::string_view::npos ||
            v.substr(1, close - 1).find('\\') != std::string_view::npos) {
          bad = true;
          return {};
        }
        return v.substr(1, close - 1);
      }
      return v;
    }
    pos = next == std::string_view::npos ? std::string_view::npos : pos + 1 + next;
  }
  return {};
}

// Pairs split at any of `seps`.
FormModel urlencodedWith(std::string_view body, std::string_view seps, std::string& model) {
  int found = 0;
  size_t start = 0;
  while (start <= body.size()) {
    size_t amp = body.find_first_of(seps, start);
    if (amp == std::string_view::npos) amp = body.size();
    std::string_view pair = body.substr(start, amp - start);
    const size_t eq = pair.find('=');
    if (!pair.empty() && unquotePlus(pair.substr(0, eq)) == "model") {
      if (++found > 1) return FormModel::kAmbiguous;
      model = unquotePlus(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
      if (model.size() > kMaxFormModel || !validUtf8(model)) return FormModel::kAmbiguous;
    }
    start = amp + 1;
  }
  return found ? FormModel::kOne : FormModel::kNone;
}

// Form parsers disagree on ';' as a pair separator (older Python split on it): both readings
// must agree, else the field is ambiguous.
FormModel urlencoded(std::string_view body, std::string& model) {
  const FormModel amp = urlencodedWith(body, "&", model);
  if (body.find(';') == std::string_view::npos || amp == FormModel::kAmbiguous) return amp;
  std::string other;
  const FormModel both = urlencodedWith(body, "&;", other);
  return both == amp && other == model ? amp : FormModel::kAmbiguous;
}

FormModel multipart(std::string_view ct, std::string_view body, std::string& model) {
  bool bad = false;
  const std::string_view boundary = paramOf(ct, "boundary", bad);
  if (bad || boundary.empty() || boundary.size() > 200) return FormModel::kAmbiguous;
  const std::string delim = "--" + std::string(boundary);
  // The first delimiter (a preamble before it is ignored, as RFC 2046 says).
  size_t pos = body.find(delim);
  if (pos == std::string_view::npos) return FormModel::kAmbiguous;
  int found = 0;
  for (int parts = 0;; ++parts) {
    if (parts > 10000) return FormModel::kAmbiguous;
    pos += delim.size();
    if (body.substr(pos, 2) == "--") break;  // the closing delimiter
    if (body.substr(pos, 2) != "\r\n") return FormModel::kAmbiguous;
    pos += 2;
    // The part's headers end at an empty line (the very next one when it has none).
    const size_t head_end = body.substr(pos, 2) == "\r\n" ? pos : body.find("\r\n\r\n", pos);
    if (head_end == std::string_view::npos) return FormModel::kAmbiguous;
    std::string_view headers = body.substr(pos, head_end - pos);
    const size_t data = head_end + (head_end == pos ? 2 : 4);
    const size_t next = body.find("\r\n" + delim, data);
    if (next == std::string_view::npos) return FormModel::kAmbiguous;
    // Content-Disposition: form-data; name="model" (and no filename: a file is not the field).
    std::string_view disposition;
    bool dup_disposition = false;
    size_t line = 0;
    while (line <= headers.size()) {
      size_t end = headers.find("\r\n", line);
      if (end == std::string_view::npos) end = headers.size();
      std::string_view h = headers.substr(line, end - line);
      const size_t colon = h.find(':');
      if (colon != std::string_view::npos &&
          http::iequals(trim(h.substr(0, colon)), "content-disposition")) {
        dup_disposition |= !disposition.empty();
        disposition = h.substr(colon + 1);
      }
      line = end + 2;
    }
    if (dup_disposition) return FormModel::kAmbiguous;
    bool pbad = false;
    const std::string_view name = paramOf(disposition, "name", pbad);
    bool fbad = false;
    const bool has_file = !paramOf(disposition, "filename", fbad).empty() || fbad ||
                          disposition.find("filename*") != std::string_view::npos;
    // A name the reader cannot read exactly may be "model" to the engine.
    if (pbad || name.find('%') != std::string_view::npos ||
        name.find("&#") != std::string_view::npos)
      return FormModel::kAmbiguous;
    if (name == "model" && !has_file) {
      if (++found > 1) return FormModel::kAmbiguous;
      model.assign(body.substr(data, next - data));
      if (model.size() > kMaxFormModel || !validUtf8(model)) return FormModel::kAmbiguous;
    }
    pos = next + 2;  // at the delimiter
  }
  return found ? FormModel::kOne : FormModel::kNone;
}

}  // namespace

FormModel formModel(std::string_view content_type, std::string_view body, std::string& model) {
  model.clear();
  const std::string_view type = mediaType(content_type);
  if (http::iequals(type, "application/x-www-form-urlencoded")) return urlencoded(body, model);
  if (http::iequals(type, "multipart/form-data")) return multipart(content_type, body, model);
  return FormModel::kNotForm;
}

}  // namespace kvgate::proxy
