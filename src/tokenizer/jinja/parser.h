// Syntax tree and parser. The grammar and operator precedence follow @huggingface/jinja's parser
// (if-expr < or < and < not < comparison/in < + - ~ < * / // % < ** < is-test < |filter <
// unary sign < call/member < primary), with two extensions where it has a syntax error: test
// arguments (`x is divisibleby(3)`, `x is eq 3`) and a nesting limit.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/value.h"

namespace kvgate::jinja {

enum class NodeKind : uint8_t {
  // expressions
  kLiteral,
  kIdent,
  kArray,
  kTuple,
  kObject,
  kMember,
  kSlice,
  kCall,
  kKwarg,
  kBinary,
  kUnary,
  kFilter,
  kTest,
  kSelect,
  kTernary,
  kEmpty,
  // statements
  kText,
  kOutput,
  kIf,
  kFor,
  kSet,
  kMacro,
  kBreak,
  kContinue,
  kFilterBlock
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Block = std::vector<NodePtr>;

struct MacroDef {
  std::string name;
  std::vector<NodePtr> params;  // kIdent or kKwarg (name = default)
  Block body;
  bool uses_kwargs = false;
  bool uses_varargs = false;
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string name;           // identifier, operator, filter/test name, text, member name
  Value lit;                  // kLiteral
  bool flag = false;          // kMember: computed; kTest: negate; kFilter: written as a call
  std::vector<NodePtr> kids;  // operands / arguments / list items / object key,value pairs
  Block body, alt;            // statements: if/for/set/filter bodies; alt = else/elif or for-else
  std::shared_ptr<MacroDef> macro;  // kMacro
};

struct Program {
  Block body;
};

Result<std::unique_ptr<Program>> parse(const std::vector<Token>& tokens);

}  // namespace kvgate::jinja
