// Recursive-descent parser (see parser.h for the grammar source and node layouts below).
// Node layouts: kMember kids={object, property}; kSlice kids={start, stop, step} (kEmpty when
// absent); kCall kids={callee, args...}; kKwarg name=key kids={value}; kFilter/kTest name=filter,
// kids={operand, args...}; kSelect kids={value, condition}; kTernary kids={cond, then, else};
// kFor kids={target, iterable, condition|kEmpty}; kSet kids={target[, value]}; kFilterBlock
// kids={kFilter with kEmpty operand}.
#include "tokenizer/jinja/parser.h"

#include <cerrno>
#include <cstdlib>

namespace kvgate::jinja {
namespace {

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : toks_(t) {}

  Result<std::unique_ptr<Program>> run() {
    auto prog = std::make_unique<Program>();
    while (cur_ < toks_.size()) {
      KVJ_TRY(NodePtr n, parseAny());
      if (n) prog->body.push_back(std::move(n));
    }
    return prog;
  }

 private:
  using R = Result<NodePtr>;
  const std::vector<Token>& toks_;
  size_t cur_ = 0;
  int depth_ = 0;

  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& x) : d(x) { ++d; }
    ~DepthGuard() { --d; }
  };

  int line() const {
    if (toks_.empty()) return 1;
    return toks_[cur_ < toks_.size() ? cur_ : toks_.size() - 1].line;
  }
  tl::unexpected<Error> error(const std::string& msg) const {
    return jerr("line " + std::to_string(line()) + ": " + msg);
  }
  bool is(Tok t, size_t off = 0) const {
    return cur_ + off < toks_.size() && toks_[cur_ + off].type == t;
  }
  bool isIdent(std::string_view name, size_t off = 0) const {
    return is(Tok::kIdent, off) && toks_[cur_ + off].value == name;
  }
  bool isStatement(std::initializer_list<std::string_view> names) const {
    if (!is(Tok::kOpenStmt) || !is(Tok::kIdent, 1)) return false;
    for (auto n : names)
      if (toks_[cur_ + 1].value == n) return true;
    return false;
  }
  Result<void> expect(Tok t, const char* what) {
    if (!is(t)) return error(std::string("expected ") + what);
    ++cur_;
    return {};
  }
  NodePtr make(NodeKind k, std::string name = {}) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = line();
    n->name = std::move(name);
    return n;
  }
  Result<void> checkDepth() {
    if (depth_ > kMaxParseDepth) return error("template nested too deeply");
    return {};
  }

  // Parses statements until one of `ends` ({% end... %}) is next.
  Result<Block> parseUntil(std::initializer_list<std::string_view> ends, const char* what) {
    Block body;
    while (!isStatement(ends)) {
      if (cur_ >= toks_.size())
        return error(std::string("unexpected end of template, expected ") + what);
      KVJ_TRY(NodePtr n, parseAny());
      if (n) body.push_back(std::move(n));
    }
    return body;
  }
  Result<void> expectEnd(const char* name) {
    KVJ_CHECK(expect(Tok::kOpenStmt, "{%"));
    if (!isIdent(name)) return error(std::string("expected ") + name);
    ++cur_;
    return expect(Tok::kCloseStmt, "%}");
  }

  R parseAny() {
    const Token& t = toks_[cur_];
    switch (t.type) {
      case Tok::kComment:
        ++cur_;
        return NodePtr();
      case Tok::kText: {
        auto n = make(NodeKind::kText, t.value);
        ++cur_;
        return n;
      }
      case Tok::kOpenStmt:
        return parseStatement();
      case Tok::kOpenExpr: {
        ++cur_;
        auto n = make(NodeKind::kOutput);
        KVJ_TRY(NodePtr e, parseExpression());
        n->kids.push_back(std::move(e));
        KVJ_CHECK(expect(Tok::kCloseExpr, "}}"));
        return n;
      }
      default:
        return error("unexpected token '" + t.value + "'");
    }
  }

  R parseStatement() {
    DepthGuard g(depth_);
    KVJ_CHECK(checkDepth());
    ++cur_;  // {%
    if (!is(Tok::kIdent)) return error("expected a statement name");
    std::string name = toks_[cur_].value;
    ++cur_;
    if (name == "set") return parseSet();
    if (name == "if") {
      KVJ_TRY(NodePtr n, parseIf());
      KVJ_CHECK(expectEnd("endif"));
      return n;
    }
    if (name == "for") return parseFor();
    if (name == "macro") return parseMacro();
    if (name == "break" || name == "continue") {
      auto n = make(name == "break" ? NodeKind::kBreak : NodeKind::kContinue);
      KVJ_CHECK(expect(Tok::kCloseStmt, "%}"));
      return n;
    }
    if (name == "filter") {
      auto n = make(NodeKind::kFilterBlock);
      if (!is(Tok::kIdent)) return error("expected a filter name");
      auto f = make(NodeKind::kFilter, toks_[cur_++].value);
      f->kids.push_back(make(NodeKind::kEmpty));
      if (is(Tok::kLParen)) {
        f->flag = true;
        KVJ_CHECK(parseArgs(f->kids));
      }
      n->kids.push_back(std::move(f));
      KVJ_CHECK(expect(Tok::kCloseStmt, "%}"));
      KVJ_TRY(n->body, parseUntil({"endfilter"}, "endfilter"));
      KVJ_CHECK(expectEnd("endfilter"));
      return n;
    }
    return error("Unknown statement type: " + name);
  }

  R parseSet() {
    auto n = make(NodeKind::kSet);
    KVJ_TRY(NodePtr target, parseExpressionSequence(false));
    n->kids.push_back(std::move(target));
    if (is(Tok::kEquals)) {
      ++cur_;
      KVJ_TRY(NodePtr value, parseExpressionSequence(false));
      n->kids.push_back(std::move(value));
    } else {
      KVJ_CHECK(expect(Tok::kCloseStmt, "%}"));
      KVJ_TRY(n->body, parseUntil({"endset"}, "endset"));
      KVJ_CHECK(expect(Tok::kOpenStmt, "{%"));
      ++cur_;  // endset
    }
    KVJ_CHECK(expect(Tok::kCloseStmt, "%}"));
    return n;
  }

  R parseIf() {
    DepthGuard g(depth_);
    KVJ_CHECK(checkDepth());
    auto n = make(NodeKind::kIf);
    KVJ_TRY(NodePtr test, parseExpression());
    n->kids.push_back(std::move(test));
    KVJ_CHECK(expect(Tok::kCloseStmt, "%}"));
    KVJ_TRY(n->body, parseUntil({"elif", "else", "endif"}, "endif"));
    if (isStatement({"elif"})) {
      cur_ += 2;
      KVJ_TRY(NodePtr elif, parseIf());
      n->alt.push_back(std::move(elif));
    } else if (isStatement({"else"})) {
      cur_ += 2;
      KVJ_CHECK(expect(Tok::kCloseStmt, "%}"));
      KVJ_TRY(n->alt, parseUntil({"endif"}, "endif"));
    }
    return n;
  }

  R parseFor() {
    auto n = make(NodeKind::kFor);
    KVJ_TRY(NodePtr target, parseExpressionSequence(true));
    if (target->kind != NodeKind::kIdent && target->kind != NodeKind::kTuple) {
      return error("Expected identifier/tuple for the loop variable");
    }
    if (!isIdent("in")) return error("Expected `in` keyword following loop variable");
    ++cur_;
    KVJ_TRY(NodePtr iterable, parseExpression());
    n->kids.push_back(std::move(target));
    if (iterable->kind == NodeKind::kSelect) {  // `for x in xs if cond`
      n->kids.push_back(std::move(iterable->kids[0]));
      n->kids.push_back(std::move(iterable->kids[1]));
    } else {
      n->kids.push_back(std::move(iterable));
      n->kids.push_back(make(NodeKind::kEmpty));
    }
    KVJ_CHECK(expect(Tok::kCloseStmt, "%}"));
    KVJ_TRY(n->body, parseUntil({"endfor", "else"}, "endfor"));
    if (isStatement({"else"})) {
      cur_ += 2;
      KVJ_CHECK(expect(Tok::kCloseStmt, "%}"));
      KVJ_TRY(n->alt, parseUntil({"endfor"}, "endfor"));
    }
    KVJ_CHECK(expectEnd("endfor"));
    return n;
  }

  static void scanSpecial(const Node& n, MacroDef& m) {
    if (n.kind == NodeKind::kIdent) {
      if (n.name == "kwargs") m.uses_kwargs = true;
      if (n.name == "varargs") m.uses_varargs = true;
    }
    for (const auto& k : n.kids)
      if (k) scanSpecial(*k, m);
    for (const auto& k : n.body)
      if (k) scanSpecial(*k, m);
    for (const auto& k : n.alt)
      if (k) scanSpecial(*k, m);
  }

  R parseMacro() {
    auto n = make(NodeKind::kMacro);
    auto m = std::make_shared<MacroDef>();
    if (!is(Tok::kIdent)) return error("Expected identifier following macro statement");
    m->name = toks_[cur_++].value;
    if (!is(Tok::kLParen)) return error("expected ( after the macro name");
    KVJ_CHECK(parseArgs(m->params));
    for (size_t k = 0; k < m->params.size(); ++k) {
      const Node& p = *m->params[k];
      if (p.kind != NodeKind::kIdent && p.kind != NodeKind::kKwarg) {
        return error("Expected identifier for parameter declaration");
      }
      for (size_t j = 0; j < k; ++j) {
        if (m->params[j]->name == p.name) return error("Duplicate parameter name: " + p.name);
      }
    }
    KVJ_CHECK(expect(Tok::kCloseStmt, "%}"));
    KVJ_TRY(m->body, parseUntil({"endmacro"}, "endmacro"));
    KVJ_CHECK(expectEnd("endmacro"));
    for (const auto& s : m->body) scanSpecial(*s, *m);
    n->macro = std::move(m);
    return n;
  }

  R parseExpressionSequence(bool primary) {
    KVJ_TRY(NodePtr first, primary ? parsePrimary() : parseExpression());
    if (!is(Tok::kComma)) return first;
    auto t = make(NodeKind::kTuple);
    t->kids.push_back(std::move(first));
    while (is(Tok::kComma)) {
      ++cur_;
      KVJ_TRY(NodePtr e, primary ? parsePrimary() : parseExpression());
      t->kids.push_back(std::move(e));
    }
    return t;
  }

  R parseExpression() {
    DepthGuard g(depth_);
    KVJ_CHECK(checkDepth());
    return parseIfExpression();
  }

  R parseIfExpression() {
    KVJ_TRY(NodePtr a, parseOr());
    if (!isIdent("if")) return a;
    ++cur_;
    KVJ_TRY(NodePtr test, parseOr());
    if (isIdent("else")) {
      ++cur_;
      DepthGuard g(depth_);
      KVJ_CHECK(checkDepth());
      KVJ_TRY(NodePtr other, parseIfExpression());
      auto n = make(NodeKind::kTernary);
      n->kids.push_back(std::move(test));
      n->kids.push_back(std::move(a));
      n->kids.push_back(std::move(other));
      return n;
    }
    auto n = make(NodeKind::kSelect);
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(test));
    return n;
  }

  NodePtr binary(std::string op, NodePtr l, NodePtr r) {
    auto n = make(NodeKind::kBinary, std::move(op));
    n->kids.push_back(std::move(l));
    n->kids.push_back(std::move(r));
    return n;
  }

  R parseOr() {
    KVJ_TRY(NodePtr left, parseAnd());
    while (isIdent("or")) {
      ++cur_;
      KVJ_TRY(NodePtr right, parseAnd());
      left = binary("or", std::move(left), std::move(right));
    }
    return left;
  }
  R parseAnd() {
    KVJ_TRY(NodePtr left, parseNot());
    while (isIdent("and")) {
      ++cur_;
      KVJ_TRY(NodePtr right, parseNot());
      left = binary("and", std::move(left), std::move(right));
    }
    return left;
  }
  R parseNot() {
    if (!isIdent("not")) return parseComparison();
    // HF quirk kept: `not a not b` keeps only the last negation; a plain `not not x` nests.
    NodePtr result;
    while (isIdent("not")) {
      ++cur_;
      DepthGuard g(depth_);
      KVJ_CHECK(checkDepth());
      KVJ_TRY(NodePtr arg, parseNot());
      result = make(NodeKind::kUnary, "not");
      result->kids.push_back(std::move(arg));
    }
    return result;
  }
  R parseComparison() {
    KVJ_TRY(NodePtr left, parseAdditive());
    while (true) {
      std::string op;
      if (isIdent("not") && isIdent("in", 1)) {
        op = "not in";
        cur_ += 2;
      } else if (isIdent("in")) {
        op = "in";
        ++cur_;
      } else if (is(Tok::kComparison)) {
        op = toks_[cur_++].value;
      } else
        break;
      KVJ_TRY(NodePtr right, parseAdditive());
      left = binary(op, std::move(left), std::move(right));
    }
    return left;
  }
  R parseAdditive() {
    KVJ_TRY(NodePtr left, parseMultiplicative());
    while (is(Tok::kAdditive)) {
      std::string op = toks_[cur_++].value;
      KVJ_TRY(NodePtr right, parseMultiplicative());
      left = binary(op, std::move(left), std::move(right));
    }
    return left;
  }
  R parseMultiplicative() {
    KVJ_TRY(NodePtr left, parsePower());
    while (is(Tok::kMultiplicative)) {
      std::string op = toks_[cur_++].value;
      KVJ_TRY(NodePtr right, parsePower());
      left = binary(op, std::move(left), std::move(right));
    }
    return left;
  }
  R parsePower() {
    KVJ_TRY(NodePtr left, parseTest());
    while (is(Tok::kPower)) {
      ++cur_;
      KVJ_TRY(NodePtr right, parseTest());
      left = binary("**", std::move(left), std::move(right));
    }
    return left;
  }
  static bool testTakesArg(const std::string& n) {
    return n == "divisibleby" || n == "eq" || n == "equalto" || n == "ne" || n == "lt" ||
           n == "gt" || n == "le" || n == "ge" || n == "in" || n == "sameas";
  }
  R parseTest() {
    KVJ_TRY(NodePtr operand, parseFilter());
    while (isIdent("is")) {
      ++cur_;
      bool negate = isIdent("not");
      if (negate) ++cur_;
      if (!is(Tok::kIdent)) return error("Expected identifier for the test");
      auto n = make(NodeKind::kTest, toks_[cur_++].value);
      n->flag = negate;
      n->kids.push_back(std::move(operand));
      if (is(Tok::kLParen)) {
        KVJ_CHECK(parseArgs(n->kids));
      } else if (testTakesArg(n->name) &&
                 (is(Tok::kNumber) || is(Tok::kString) ||
                  (is(Tok::kIdent) && !isIdent("and") && !isIdent("or") && !isIdent("if") &&
                   !isIdent("else") && !isIdent("in") && !isIdent("not") && !isIdent("is")))) {
        KVJ_TRY(NodePtr arg, parsePrimary());
        n->kids.push_back(std::move(arg));
      }
      operand = std::move(n);
    }
    return operand;
  }
  R parseFilter() {
    KVJ_TRY(NodePtr operand, parseUnarySign());
    while (is(Tok::kPipe)) {
      ++cur_;
      if (!is(Tok::kIdent)) return error("Expected identifier for the filter");
      auto n = make(NodeKind::kFilter, toks_[cur_++].value);
      n->kids.push_back(std::move(operand));
      if (is(Tok::kLParen)) {
        n->flag = true;
        KVJ_CHECK(parseArgs(n->kids));
      }
      operand = std::move(n);
    }
    return operand;
  }
  R parseUnarySign() {
    if ((is(Tok::kUnary) || is(Tok::kAdditive)) &&
        (toks_[cur_].value == "-" || toks_[cur_].value == "+")) {
      auto n = make(NodeKind::kUnary, toks_[cur_++].value);
      DepthGuard g(depth_);
      KVJ_CHECK(checkDepth());
      KVJ_TRY(NodePtr arg, parseUnarySign());
      n->kids.push_back(std::move(arg));
      return n;
    }
    return parseCallMember();
  }
  R parseCallMember() {
    KVJ_TRY(NodePtr e, parsePrimary());
    while (true) {
      if (is(Tok::kDot) || is(Tok::kLBracket)) {
        KVJ_TRY(e, parseMember(std::move(e)));
      } else if (is(Tok::kLParen)) {
        auto call = make(NodeKind::kCall);
        call->kids.push_back(std::move(e));
        KVJ_CHECK(parseArgs(call->kids));
        e = std::move(call);
      } else {
        return e;
      }
    }
  }
  // Appends arguments (positional, then name=value as kKwarg) to `out`.
  Result<void> parseArgs(std::vector<NodePtr>& out) {
    DepthGuard g(depth_);
    KVJ_CHECK(checkDepth());
    ++cur_;  // (
    bool saw_kw = false;
    while (!is(Tok::kRParen)) {
      if (cur_ >= toks_.size()) return error("expected )");
      if (is(Tok::kPower) || (is(Tok::kMultiplicative) && toks_[cur_].value == "*")) {
        return error("argument unpacking is not supported");
      }
      KVJ_TRY(NodePtr arg, parseExpression());
      if (is(Tok::kEquals)) {
        ++cur_;
        if (arg->kind != NodeKind::kIdent) return error("Expected identifier for keyword argument");
        auto kw = make(NodeKind::kKwarg, arg->name);
        KVJ_TRY(NodePtr value, parseExpression());
        kw->kids.push_back(std::move(value));
        arg = std::move(kw);
        saw_kw = true;
      } else if (saw_kw) {
        return error("Positional arguments must come before keyword arguments");
      }
      out.push_back(std::move(arg));
      if (is(Tok::kComma)) ++cur_;
    }
    ++cur_;  // )
    return {};
  }
  R parseMember(NodePtr object) {
    bool computed = is(Tok::kLBracket);
    ++cur_;
    auto n = make(NodeKind::kMember);
    n->flag = computed;
    n->kids.push_back(std::move(object));
    if (!computed) {
      if (is(Tok::kIdent)) {
        auto lit = make(NodeKind::kLiteral);
        lit->lit = Value::str(toks_[cur_++].value);
        n->kids.push_back(std::move(lit));
      } else if (is(Tok::kNumber) && toks_[cur_].value.find('.') == std::string::npos) {
        KVJ_TRY(NodePtr num, parsePrimary());
        n->kids.push_back(std::move(num));
      } else {
        return error("Expected identifier or integer following dot operator");
      }
      return n;
    }
    std::vector<NodePtr> parts;
    bool is_slice = false;
    while (!is(Tok::kRBracket)) {
      if (cur_ >= toks_.size()) return error("expected ]");
      if (is(Tok::kColon)) {
        parts.push_back(make(NodeKind::kEmpty));
        ++cur_;
        is_slice = true;
      } else {
        KVJ_TRY(NodePtr e, parseExpression());
        parts.push_back(std::move(e));
        if (is(Tok::kColon)) {
          ++cur_;
          is_slice = true;
        }
      }
    }
    ++cur_;  // ]
    if (parts.empty()) return error("Expected at least one argument for member/slice expression");
    if (is_slice) {
      if (parts.size() > 3) return error("Expected 0-3 arguments for slice expression");
      auto s = make(NodeKind::kSlice);
      for (auto& p : parts) s->kids.push_back(std::move(p));
      while (s->kids.size() < 3) s->kids.push_back(make(NodeKind::kEmpty));
      n->kids.push_back(std::move(s));
    } else {
      if (parts.size() > 1) return error("expected ] in subscript");
      n->kids.push_back(std::move(parts[0]));
    }
    return n;
  }

  R parsePrimary() {
    if (cur_ >= toks_.size()) return error("unexpected end of template");
    const Token& t = toks_[cur_++];
    switch (t.type) {
      case Tok::kNumber: {
        auto n = make(NodeKind::kLiteral);
        if (t.value.find('.') != std::string::npos) {
          n->lit = Value::real(std::strtod(t.value.c_str(), nullptr));
        } else {
          errno = 0;
          long long v = std::strtoll(t.value.c_str(), nullptr, 10);
          if (errno == ERANGE) return error("integer literal out of range: " + t.value);
          n->lit = Value::integer(v);
        }
        return n;
      }
      case Tok::kString: {
        auto n = make(NodeKind::kLiteral);
        std::string s = t.value;
        while (is(Tok::kString)) s += toks_[cur_++].value;  // implicit concatenation
        n->lit = Value::str(std::move(s));
        return n;
      }
      case Tok::kIdent:
        return make(NodeKind::kIdent, t.value);
      case Tok::kLParen: {
        KVJ_TRY(NodePtr e, parseExpressionSequence(false));
        KVJ_CHECK(expect(Tok::kRParen, ")"));
        return e;
      }
      case Tok::kLBracket: {
        DepthGuard g(depth_);
        KVJ_CHECK(checkDepth());
        auto n = make(NodeKind::kArray);
        while (!is(Tok::kRBracket)) {
          if (cur_ >= toks_.size()) return error("expected ]");
          KVJ_TRY(NodePtr e, parseExpression());
          n->kids.push_back(std::move(e));
          if (is(Tok::kComma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      case Tok::kLBrace: {
        DepthGuard g(depth_);
        KVJ_CHECK(checkDepth());
        auto n = make(NodeKind::kObject);
        while (!is(Tok::kRBrace)) {
          if (cur_ >= toks_.size()) return error("expected }");
          KVJ_TRY(NodePtr k, parseExpression());
          KVJ_CHECK(expect(Tok::kColon, "':' between key and value in object literal"));
          KVJ_TRY(NodePtr v, parseExpression());
          n->kids.push_back(std::move(k));
          n->kids.push_back(std::move(v));
          if (is(Tok::kComma)) ++cur_;
        }
        ++cur_;
        return n;
      }
      default:
        --cur_;
        return error("Unexpected token '" + t.value + "'");
    }
  }
};

}  // namespace

Result<std::unique_ptr<Program>> parse(const std::vector<Token>& tokens) {
  Parser p(tokens);
  return p.run();
}

}  // namespace kvgate::jinja
