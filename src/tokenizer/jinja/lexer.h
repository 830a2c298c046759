// Template source -> tokens, replicating @huggingface/jinja's lexer: the preprocessing passes
// (drop one trailing newline; lstrip_blocks; trim_blocks; remove {% generation %} tags), text
// scanning, `-` whitespace control, string escapes, numbers and operators.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvgate::jinja {

enum class Tok : uint8_t {
  kText,
  kNumber,
  kString,
  kIdent,
  kEquals,
  kLParen,
  kRParen,
  kOpenStmt,
  kCloseStmt,
  kOpenExpr,
  kCloseExpr,
  kLBracket,
  kRBracket,
  kLBrace,
  kRBrace,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,
  kMultiplicative,
  kPower,
  kComparison,
  kUnary,
  kComment
};

struct Token {
  Tok type;
  std::string value;
  int line;
};

// Errors: fail(400, "chat_template", "line L: ...").
Result<std::vector<Token>> tokenize(std::string_view source);

}  // namespace kvgate::jinja
