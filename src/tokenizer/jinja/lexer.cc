// Lexer (see lexer.h). Each pass keeps, per output byte, the source line it came from.
#include "tokenizer/jinja/lexer.h"

#include "tokenizer/jinja/text.h"
#include "tokenizer/jinja/value.h"

namespace kvgate::jinja {
namespace {

struct Src {
  std::string text;
  std::vector<int> line;
  void push(char c, int l) {
    text += c;
    line.push_back(l);
  }
};

Src withLines(std::string_view s) {
  Src out;
  int l = 1;
  for (char c : s) {
    out.push(c, l);
    if (c == '\n') ++l;
  }
  return out;
}

// template.replace(/^[ \t]*({[#%-])/gm, "$1")  (`^` after \n or \r, as JS multiline does)
Src lstripBlocks(const Src& in) {
  Src out;
  const std::string& s = in.text;
  for (size_t p = 0; p < s.size();) {
    if (p == 0 || s[p - 1] == '\n' || s[p - 1] == '\r') {
      size_t q = p;
      while (q < s.size() && (s[q] == ' ' || s[q] == '\t')) ++q;
      if (q > p && q + 1 < s.size() && s[q] == '{' &&
          (s[q + 1] == '#' || s[q + 1] == '%' || s[q + 1] == '-')) {
        p = q;
      }
    }
    out.push(s[p], in.line[p]);
    ++p;
  }
  return out;
}

// template.replace(/([#%-]})\n/g, "$1")
Src trimBlocks(const Src& in) {
  Src out;
  const std::string& s = in.text;
  for (size_t p = 0; p < s.size();) {
    if (p + 2 < s.size() && (s[p] == '#' || s[p] == '%' || s[p] == '-') && s[p + 1] == '}' &&
        s[p + 2] == '\n') {
      out.push(s[p], in.line[p]);
      out.push(s[p + 1], in.line[p + 1]);
      p += 3;
      continue;
    }
    out.push(s[p], in.line[p]);
    ++p;
  }
  return out;
}

// /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs -> (lstrip ? "" : before) + (rstrip ? "" :
// after)
size_t matchGeneration(const std::string& s, size_t p, bool& lstrip, bool& rstrip) {
  if (s.compare(p, 2, "{%") != 0) return 0;
  size_t q = p + 2;
  lstrip = q < s.size() && s[q] == '-';
  if (lstrip) ++q;
  while (size_t n = text::spaceLenAt(s, q)) q += n;
  if (s.compare(q, 3, "end") == 0 && s.compare(q + 3, 10, "generation") == 0) q += 3;
  if (s.compare(q, 10, "generation") != 0) return 0;
  q += 10;
  while (size_t n = text::spaceLenAt(s, q)) q += n;
  rstrip = q < s.size() && s[q] == '-';
  if (rstrip) ++q;
  if (s.compare(q, 2, "%}") != 0) return 0;
  return q + 2 - p;
}

Src dropGenerationTags(const Src& in) {
  Src out;
  const std::string& s = in.text;
  for (size_t p = 0; p < s.size();) {
    bool lstrip = false, rstrip = false;
    if (s[p] == '{') {
      if (size_t n = matchGeneration(s, p, lstrip, rstrip)) {
        if (lstrip) {
          std::string_view kept = text::trimEnd(out.text);
          out.text.resize(kept.size());
          out.line.resize(kept.size());
        }
        p += n;
        if (rstrip)
          while (size_t k = text::spaceLenAt(s, p)) p += k;
        continue;
      }
    }
    out.push(s[p], in.line[p]);
    ++p;
  }
  return out;
}

struct Lexer {
  Lexer(const std::string& s, const std::vector<int>& l) : src(s), lines(l) {}
  const std::string& src;
  const std::vector<int>& lines;
  std::vector<Token> tokens;
  size_t pos = 0;
  int curly_depth = 0;

  int lineAt(size_t p) const {
    if (lines.empty()) return 1;
    return lines[p < lines.size() ? p : lines.size() - 1];
  }
  tl::unexpected<Error> error(const std::string& msg) const {
    return jerr("line " + std::to_string(lineAt(pos)) + ": " + msg);
  }
  bool at(std::string_view seq) const { return src.compare(pos, seq.size(), seq) == 0; }
  void push(Tok t, std::string v) { tokens.push_back({t, std::move(v), lineAt(pos)}); }
  Tok lastType() const { return tokens.empty() ? Tok::kText : tokens.back().type; }

  void stripTrailingWhitespace() {
    if (tokens.empty() || tokens.back().type != Tok::kText) return;
    std::string& v = tokens.back().value;
    v.resize(text::trimEnd(v).size());
    if (v.empty()) tokens.pop_back();
  }
  void skipLeadingWhitespace() {
    while (size_t n = text::spaceLenAt(src, pos)) pos += n;
  }

  // consumeWhile() for string literals: handles escapes; reaching the end is an error.
  Result<std::string> consumeString(char quote) {
    std::string out;
    while (true) {
      if (pos >= src.size()) return error("Unexpected end of input");
      char c = src[pos];
      if (c == quote) return out;
      if (c == '\\') {
        ++pos;
        if (pos >= src.size()) return error("Unexpected end of input");
        char e = src[pos++];
        if (e == 'x' || e == 'u') {
          size_t len = e == 'x' ? 2 : 4;
          if (pos + len > src.size()) return error("Invalid hexadecimal escape sequence");
          unsigned cp = 0;
          for (size_t k = 0; k < len; ++k) {
            char h = src[pos + k];
            int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
            if (d < 0) return error("Invalid hexadecimal escape sequence");
            cp = cp * 16 + static_cast<unsigned>(d);
          }
          pos += len;
          // Join a UTF-16 surrogate pair written as two \u escapes.
          if (cp >= 0xD800 && cp < 0xDC00 && src.compare(pos, 2, "\\u") == 0 &&
              pos + 6 <= src.size()) {
            unsigned lo = 0;
            bool ok = true;
            for (size_t k = 2; k < 6; ++k) {
              char h = src[pos + k];
              int d = h >= '0' && h <= '9'   ? h - '0'
                      : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                             : -1;
              if (d < 0) ok = false;
              lo = lo * 16 + static_cast<unsigned>(d < 0 ? 0 : d);
            }
            if (ok && lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              pos += 6;
            }
          }
          text::appendUtf8(out, cp);
          continue;
        }
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'v':
            out += '\v';
            break;
          case '\'':
            out += '\'';
            break;
          case '"':
            out += '"';
            break;
          case '\\':
            out += '\\';
            break;
          default:
            return error(std::string("Unexpected escaped character: ") + e);
        }
        continue;
      }
      out += c;
      ++pos;
    }
  }

  std::string digits() {
    size_t start = pos;
    while (pos < src.size() && src[pos] >= '0' && src[pos] <= '9') ++pos;
    return src.substr(start, pos - start);
  }
  bool digitAt(size_t p) const { return p < src.size() && src[p] >= '0' && src[p] <= '9'; }

  Result<std::vector<Token>> run() {
    static const std::pair<const char*, Tok> kTable[] = {
        {"{%", Tok::kOpenStmt},      {"%}", Tok::kCloseStmt},
        {"{{", Tok::kOpenExpr},      {"}}", Tok::kCloseExpr},
        {"(", Tok::kLParen},         {")", Tok::kRParen},
        {"{", Tok::kLBrace},         {"}", Tok::kRBrace},
        {"[", Tok::kLBracket},       {"]", Tok::kRBracket},
        {",", Tok::kComma},          {".", Tok::kDot},
        {":", Tok::kColon},          {"|", Tok::kPipe},
        {"<=", Tok::kComparison},    {">=", Tok::kComparison},
        {"==", Tok::kComparison},    {"!=", Tok::kComparison},
        {"<", Tok::kComparison},     {">", Tok::kComparison},
        {"+", Tok::kAdditive},       {"-", Tok::kAdditive},
        {"~", Tok::kAdditive},       {"**", Tok::kPower},
        {"*", Tok::kMultiplicative}, {"//", Tok::kMultiplicative},
        {"/", Tok::kMultiplicative}, {"%", Tok::kMultiplicative},
        {"=", Tok::kEquals}};
    while (pos < src.size()) {
      Tok last = lastType();
      if (tokens.empty() || last == Tok::kCloseStmt || last == Tok::kCloseExpr ||
          last == Tok::kComment) {
        size_t start = pos;
        while (pos < src.size() &&
               !(src[pos] == '{' && pos + 1 < src.size() &&
                 (src[pos + 1] == '%' || src[pos + 1] == '{' || src[pos + 1] == '#'))) {
          ++pos;
        }
        if (pos > start) {
          tokens.push_back({Tok::kText, src.substr(start, pos - start), lineAt(start)});
          continue;
        }
      }
      if (at("{#")) {
        pos += 2;
        bool strip_before = pos < src.size() && src[pos] == '-';
        if (strip_before) ++pos;
        size_t start = pos;
        while (!at("#}")) {
          if (pos + 2 >= src.size()) return error("Missing end of comment tag");
          ++pos;
        }
        std::string comment = src.substr(start, pos - start);
        bool strip_after = !comment.empty() && comment.back() == '-';
        if (strip_before) stripTrailingWhitespace();
        push(Tok::kComment, "");
        pos += 2;
        if (strip_after) skipLeadingWhitespace();
        continue;
      }
      if (at("{%-")) {
        stripTrailingWhitespace();
        push(Tok::kOpenStmt, "{%");
        pos += 3;
        continue;
      }
      if (at("{{-")) {
        stripTrailingWhitespace();
        push(Tok::kOpenExpr, "{{");
        curly_depth = 0;
        pos += 3;
        continue;
      }
      skipLeadingWhitespace();  // consumeWhile(isWhitespace)
      if (pos >= src.size()) break;
      if (at("-%}")) {
        push(Tok::kCloseStmt, "%}");
        pos += 3;
        skipLeadingWhitespace();
        continue;
      }
      if (at("-}}")) {
        push(Tok::kCloseExpr, "}}");
        pos += 3;
        skipLeadingWhitespace();
        continue;
      }
      char c = src[pos];
      if (c == '-' || c == '+') {
        Tok lt = lastType();
        if (tokens.empty() || lt == Tok::kText)
          return error(std::string("Unexpected character: ") + c);
        if (lt != Tok::kIdent && lt != Tok::kNumber && lt != Tok::kString && lt != Tok::kRParen &&
            lt != Tok::kRBracket) {
          ++pos;
          std::string num = digits();
          if (!num.empty() && pos < src.size() && src[pos] == '.' && digitAt(pos + 1)) {
            ++pos;
            num += "." + digits();
          }
          push(num.empty() ? Tok::kUnary : Tok::kNumber, std::string(1, c) + num);
          continue;
        }
      }
      bool matched = false;
      for (const auto& [seq, type] : kTable) {
        if (type == Tok::kCloseExpr && curly_depth > 0) continue;
        if (!at(seq)) continue;
        push(type, seq);
        if (type == Tok::kOpenExpr)
          curly_depth = 0;
        else if (type == Tok::kLBrace)
          ++curly_depth;
        else if (type == Tok::kRBrace)
          --curly_depth;
        pos += std::string_view(seq).size();
        matched = true;
        break;
      }
      if (matched) continue;
      if (c == '\'' || c == '"') {
        int line = lineAt(pos);
        ++pos;
        auto s = consumeString(c);
        if (!s) return tl::unexpected(s.error());
        tokens.push_back({Tok::kString, std::move(*s), line});
        ++pos;
        continue;
      }
      if (c >= '0' && c <= '9') {
        std::string num = digits();
        if (lastType() != Tok::kDot && pos < src.size() && src[pos] == '.' && digitAt(pos + 1)) {
          ++pos;
          num += "." + digits();
        }
        push(Tok::kNumber, num);
        continue;
      }
      auto word = [](char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               ch == '_';
      };
      if (word(c)) {
        size_t start = pos;
        while (pos < src.size() && word(src[pos])) ++pos;
        push(Tok::kIdent, src.substr(start, pos - start));
        continue;
      }
      size_t len = 0;
      text::decode(src, pos, len);
      return error("Unexpected character: " + src.substr(pos, len));
    }
    return std::move(tokens);
  }
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) {
  if (source.size() > kMaxTemplateBytes) return jerr("line 1: template too large");
  if (!source.empty() && source.back() == '\n') source.remove_suffix(1);
  Src s = dropGenerationTags(trimBlocks(lstripBlocks(withLines(source))));
  Lexer lx(s.text, s.line);
  return lx.run();
}

}  // namespace kvgate::jinja
