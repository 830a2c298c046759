// Tree-walking interpreter with @huggingface/jinja 0.5.11 semantics: dynamic scoping (a macro sees
// its caller's variables), `set` writes the innermost scope, a for loop owns one scope for all its
// iterations, break/continue drop the current iteration's partial output, and undefined prints
// nothing. Builtin filters/tests/methods/globals live in filters.cc and builtins.cc.
#pragma once
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/value.h"

namespace kvgate::jinja {

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Positional argument i, else keyword `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
  const Value* kwarg(std::string_view name) const;
};

class Interp {
 public:
  Interp(Heap& heap, std::optional<std::time_t> now) : heap_(heap), now_(now) {}
  Result<std::string> run(const Program& prog, const Value& context);

  // Used by the builtins.
  Heap& heap() { return heap_; }
  std::time_t now() const;
  Result<Args> evalArgs(const std::vector<NodePtr>& nodes, size_t first);
  Result<Value> call(const Value& fn, const Args& args);
  Result<Value> applyFilterByName(const std::string& name, const Value& operand, const Args& args,
                                  bool call_form);
  Result<Value> newString(std::string s);  // charges long strings to the step budget
  Result<Value> newArray(std::vector<Value> items);
  Result<void> step(uint64_t n = 1);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  using Frame = std::vector<std::pair<std::string, Value>>;

  Result<Flow> execBlock(const Block& block, std::string& out);
  Result<Flow> exec(const Node& n, std::string& out);
  Result<Flow> execFor(const Node& n, std::string& out);
  Result<void> execSet(const Node& n);
  Result<Value> eval(const Node& n);
  Result<Value> evalBinary(const Node& n);
  Result<Value> evalMember(const Node& n);
  Result<Value> evalCall(const Node& n);
  Result<Value> evalSlice(const Value& obj, const Node& slice);
  Result<Value> callMacro(const MacroDef& m, const Args& args);
  Result<void> append(std::string& out, std::string_view s);
  Result<void> bindTarget(const Node& target, const Value& v);

  Value lookup(const std::string& name) const;
  void setVar(const std::string& name, Value v);

  Heap& heap_;
  std::optional<std::time_t> now_;
  std::vector<Frame> frames_;
  int depth_ = 0;
  int call_depth_ = 0;
  uint64_t steps_ = 0;
};

// filters.cc
Result<Value> applyFilter(Interp& in, const std::string& name, const Value& operand,
                          const Args& args, bool call_form, const Node* node);
// builtins.cc
Result<bool> applyTest(Interp& in, const std::string& name, const Value& v, const Args& args);
bool isMethodName(const Value& self, const std::string& name);
Result<Value> callMethod(Interp& in, const Value& self, const std::string& name, const Args& args);
Result<Value> callGlobal(Interp& in, Builtin kind, const Args& args);
std::string strftimeJs(std::time_t t, std::string_view fmt);

}  // namespace kvgate::jinja
