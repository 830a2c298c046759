#include "proxy/form_model.h"

#include <string.h>

#include <optional>
#include <vector>

#include "common/percent.h"
#include "common/utf8.h"
#include "http/parser.h"

namespace kvgate::proxy {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string_view mediaType(std::string_view ct) { return trim(ct.substr(0, ct.find(';'))); }

// A header value's parameters (`type; a=b; c="d"`), read strictly: only a form every reader
// reads alike is accepted, anything else marks the value `bad` (the caller then refuses): a byte
// outside printable ASCII and tab, a parameter name outside [A-Za-z0-9._-] (so no RFC 2231
// `name*`), a name given twice (readers keep the first or the last), a quote or backslash
// before the parameters, a quoted value with a backslash (escapes differ), an unquoted value
// beyond RFC 7230 token characters (python-multipart strips <...> and older versions stop at
// ',' or '/'), more than kMaxParams parameters or a value over kMaxHeaderLine bytes.
struct Params {
  std::vector<std::pair<std::string_view, std::string_view>> items;
  bool bad = false;
  std::optional<std::string_view> get(std::string_view name) const {
    for (const auto& [k, v] : items)
      if (http::iequals(k, name)) return v;
    return std::nullopt;
  }
};

constexpr size_t kMaxParams = 16;        // parameters in one header value
constexpr size_t kMaxHeaderLine = 4096;  // python-multipart caps a header at 4,224 bytes

// RFC 7230 token characters: what every reader takes as an unquoted parameter value.
bool tokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

Params parseParams(std::string_view value) {
  Params p;
  if (value.size() > kMaxHeaderLine) {
    p.bad = true;
    return p;
  }
  for (char c : value)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') ||
        static_cast<unsigned char>(c) > 0x7e) {
      p.bad = true;
      return p;
    }
  size_t i = value.find(';');
  // The value before the parameters (a media type, or the disposition type "form-data"): a
  // quote or a backslash there shifts how Python's parser pairs the quotes that follow.
  if (value.substr(0, i).find_first_of("\"\\") != std::string_view::npos) {
    p.bad = true;
    return p;
  }
  auto sp = [&] {
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
  };
  auto nameChar = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  };
  while (i != std::string_view::npos && i < value.size()) {
    ++i;  // past ';'
    sp();
    if (i >= value.size()) break;  // a trailing ';'
    const size_t n0 = i;
    while (i < value.size() && nameChar(value[i])) ++i;
    std::string_view name = value.substr(n0, i - n0);
    sp();
    if (name.empty() || i >= value.size() || value[i] != '=') {
      p.bad = true;
      return p;
    }
    ++i;
    sp();
    std::string_view v;
    if (i < value.size() && value[i] == '"') {
      const size_t close = value.find('"', i + 1);
      if (close == std::string_view::npos) {
        p.bad = true;
        return p;
      }
      v = value.substr(i + 1, close - i - 1);
      if (v.find('\\') != std::string_view::npos) {
        p.bad = true;
        return p;
      }
      i = close + 1;
    } else {
      const size_t v0 = i;
      while (i < value.size() && tokenChar(value[i])) ++i;
      v = value.substr(v0, i - v0);
      if (v.empty()) {  // ('<', ',', '/' and the like end a token: refused below)
        p.bad = true;
        return p;
      }
    }
    if (p.items.size() >= kMaxParams || p.get(name)) {
      p.bad = true;  // a parameter given twice, or too many to check cheaply
      return p;
    }
    p.items.emplace_back(name, v);
    sp();
    if (i < value.size() && value[i] != ';') {
      p.bad = true;
      return p;
    }
  }
  return p;
}

// A charset other than UTF-8 would make the engine decode names and values otherwise.
bool utf8Charset(const Params& p) {
  auto cs = p.get("charset");
  return !cs || http::iequals(*cs, "utf-8") || http::iequals(*cs, "utf8");
}

// memmem: linear whatever the needle (no quadratic walk over a hostile body).
size_t findIn(std::string_view hay, size_t from, std::string_view needle) {
  if (from > hay.size()) return std::string_view::npos;
  const void* p = ::memmem(hay.data() + from, hay.size() - from, needle.data(), needle.size());
  return p ? static_cast<size_t>(static_cast<const char*>(p) - hay.data()) : std::string_view::npos;
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
    if (!pair.empty() && percentDecode(pair.substr(0, eq), true) == "model") {
      if (++found > 1) return FormModel::kAmbiguous;
      model = percentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1),
                            true);
      if (model.size() > kMaxFormModel || !isValidUtf8(model)) return FormModel::kAmbiguous;
    }
    start = amp + 1;
  }
  return found ? FormModel::kOne : FormModel::kNone;
}

// Form parsers disagree on ';' as a pair separator (older Python split on it): both readings
// must agree, else the field is ambiguous.
FormModel urlencoded(std::string_view body, std::string& model) {
  // Starlette reads raw bytes as latin-1, this reader as UTF-8: only ASCII reads alike.
  for (char c : body)
    if (static_cast<unsigned char>(c) >= 0x80) return FormModel::kAmbiguous;
  const FormModel amp = urlencodedWith(body, "&", model);
  if (body.find(';') == std::string_view::npos || amp == FormModel::kAmbiguous) return amp;
  std::string other;
  const FormModel both = urlencodedWith(body, "&;", other);
  return both == amp && other == model ? amp : FormModel::kAmbiguous;
}

FormModel multipart(const Params& ct, std::string_view body, std::string& model) {
  const auto boundary = ct.get("boundary");
  if (!boundary || boundary->empty() || boundary->size() > 70) return FormModel::kAmbiguous;
  const std::string delim = "--" + std::string(*boundary);
  const std::string next_delim = "\r\n" + delim;
  // The body starts with the first delimiter (python-multipart reads no preamble): a delimiter
  // found later could sit inside another form's field.
  if (body.substr(0, delim.size()) != delim) return FormModel::kAmbiguous;
  size_t pos = 0;
  int found = 0;
  for (int parts = 0;; ++parts) {
    if (parts > 10000) return FormModel::kAmbiguous;
    pos += delim.size();
    if (body.substr(pos, 2) == "--") break;  // the closing delimiter
    if (body.substr(pos, 2) != "\r\n") return FormModel::kAmbiguous;
    pos += 2;
    // The part's headers end at an empty line (the very next one when it has none).
    const size_t head_end = body.substr(pos, 2) == "\r\n" ? pos : findIn(body, pos, "\r\n\r\n");
    if (head_end == std::string_view::npos) return FormModel::kAmbiguous;
    std::string_view headers = body.substr(pos, head_end - pos);
    const size_t data = head_end + (head_end == pos ? 2 : 4);
    const size_t next = findIn(body, data, next_delim);
    if (next == std::string_view::npos) return FormModel::kAmbiguous;
    std::optional<std::string_view> disposition;
    size_t line = 0;
    while (line < headers.size()) {
      size_t end = headers.find("\r\n", line);
      if (end == std::string_view::npos) end = headers.size();
      std::string_view h = headers.substr(line, end - line);
      if (!h.empty() && (h.front() == ' ' || h.front() == '\t')) return FormModel::kAmbiguous;
      const size_t colon = h.find(':');
      if (colon == std::string_view::npos) return FormModel::kAmbiguous;
      if (http::iequals(trim(h.substr(0, colon)), "content-disposition")) {
        if (disposition) return FormModel::kAmbiguous;  // twice
        disposition = h.substr(colon + 1);
      }
      line = end + 2;
    }
    if (disposition) {
      // Only "form-data" parts are read alike (the type is otherwise ignored by Starlette).
      if (!http::iequals(trim(disposition->substr(0, disposition->find(';'))), "form-data"))
        return FormModel::kAmbiguous;
      const Params d = parseParams(*disposition);
      const auto name = d.get("name");
      if (d.bad || !name || name->find('%') != std::string_view::npos) return FormModel::kAmbiguous;
      if (*name == "model" && !d.get("filename")) {  // a file part is not the field
        if (++found > 1) return FormModel::kAmbiguous;
        model.assign(body.substr(data, next - data));
        if (model.size() > kMaxFormModel || !isValidUtf8(model)) return FormModel::kAmbiguous;
      }
    }
    pos = next + 2;  // at the delimiter
  }
  return found ? FormModel::kOne : FormModel::kNone;
}

}  // namespace

FormModel formModel(std::string_view content_type, std::string_view body, std::string& model) {
  model.clear();
  // A Content-Type the engine may read otherwise: bytes Python strips as whitespace (0x85, 0xA0)
  // or any other non-ASCII byte, or a form type in another case (Starlette compares it exactly
  // when parameters follow).
  for (char c : content_type)
    if (static_cast<unsigned char>(c) >= 0x80) return FormModel::kAmbiguous;
  const std::string_view type = mediaType(content_type);
  const bool url = http::iequals(type, "application/x-www-form-urlencoded");
  if (!url && !http::iequals(type, "multipart/form-data")) return FormModel::kNotForm;
  if (type != "application/x-www-form-urlencoded" && type != "multipart/form-data")
    return FormModel::kAmbiguous;
  const Params ct = parseParams(content_type);
  if (ct.bad || !utf8Charset(ct)) return FormModel::kAmbiguous;
  return url ? urlencoded(body, model) : multipart(ct, body, model);
}

}  // namespace kvgate::proxy
