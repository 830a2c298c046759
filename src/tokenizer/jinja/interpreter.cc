// Statement execution and expression evaluation (see interpreter.h).
#include "tokenizer/jinja/interpreter.h"

#include <cmath>
#include <limits>

#include "tokenizer/jinja/convert.h"
#include "tokenizer/jinja/text.h"

namespace kvgate::jinja {
namespace {

struct Counter {
  int& d;
  explicit Counter(int& x) : d(x) { ++d; }
  ~Counter() { --d; }
};

}  // namespace

const Value* Args::get(size_t i, std::string_view name) const {
  if (i < pos.size()) return &pos[i];
  return kwarg(name);
}

const Value* Args::kwarg(std::string_view name) const {
  for (const auto& [k, v] : kw)
    if (k == name) return &v;
  return nullptr;
}

std::time_t Interp::now() const { return now_ ? *now_ : std::time(nullptr); }

Result<void> Interp::step(uint64_t n) {
  steps_ += n;
  if (steps_ > kMaxSteps) return jerr("template evaluation exceeded its step budget");
  return {};
}

Result<Value> Interp::newString(std::string s) {
  if (s.size() > kMaxOutputBytes) return jerr("string exceeds the output size limit");
  KVJ_CHECK(step(s.size() / 256));
  return Value::str(std::move(s));
}

Result<Value> Interp::newArray(std::vector<Value> items) {
  if (!heap_.charge(items.size() + 1)) return jerr("template memory budget exceeded");
  Value v{Kind::kArray};
  v.arr = heap_.newArray();
  v.arr->items = std::move(items);
  return v;
}

Result<void> Interp::append(std::string& out, std::string_view s) {
  if (out.size() + s.size() > kMaxOutputBytes) return jerr("rendered output exceeds 16 MiB");
  out.append(s);
  return {};
}

Value Interp::lookup(const std::string& name) const {
  for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
    for (const auto& [k, v] : *f)
      if (k == name) return v;
  }
  return Value{};
}

void Interp::setVar(const std::string& name, Value v) {
  for (auto& [k, old] : frames_.back()) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  frames_.back().emplace_back(name, std::move(v));
}

Result<std::string> Interp::run(const Program& prog, const Value& context) {
  static const char* kHfGlobals[] = {"namespace",       "false", "true",         "none",
                                     "raise_exception", "range", "strftime_now", "True",
                                     "False",           "None"};
  Frame globals;
  auto fn = [&](Builtin b) {
    Value v{Kind::kFunction};
    v.fn = heap_.newCallable(Callable{b, {}, {}, nullptr});
    return v;
  };
  globals.emplace_back("namespace", fn(Builtin::kNamespace));
  globals.emplace_back("false", Value::boolean(false));
  globals.emplace_back("true", Value::boolean(true));
  globals.emplace_back("none", Value::null());
  globals.emplace_back("raise_exception", fn(Builtin::kRaiseException));
  globals.emplace_back("range", fn(Builtin::kRange));
  globals.emplace_back("strftime_now", fn(Builtin::kStrftimeNow));
  globals.emplace_back("True", Value::boolean(true));
  globals.emplace_back("False", Value::boolean(false));
  globals.emplace_back("None", Value::null());
  globals.emplace_back("dict", fn(Builtin::kDict));  // extension (Python Jinja2 global)
  frames_.clear();
  frames_.push_back(std::move(globals));
  if (!context.isObject()) return jerr("render context must be an object");
  for (const auto& [k, v] : context.obj->entries) {
    for (const char* g : kHfGlobals) {
      if (k == g) return jerr("Variable already declared: " + k);
    }
    setVar(k, v);
  }
  std::string out;
  KVJ_TRY(Flow flow, execBlock(prog.body, out));
  if (flow != Flow::kNormal) return jerr("break/continue outside of a for loop");
  return out;
}

Result<Interp::Flow> Interp::execBlock(const Block& block, std::string& out) {
  for (const auto& n : block) {
    KVJ_TRY(Flow f, exec(*n, out));
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Result<Interp::Flow> Interp::exec(const Node& n, std::string& out) {
  Counter c(depth_);
  if (depth_ > kMaxEvalDepth) return jerr("template nesting too deep");
  KVJ_CHECK(step());
  switch (n.kind) {
    case NodeKind::kText:
      KVJ_CHECK(append(out, n.name));
      return Flow::kNormal;
    case NodeKind::kOutput: {
      KVJ_TRY(Value v, eval(*n.kids[0]));
      if (v.isNull() || v.isUndefined()) return Flow::kNormal;
      KVJ_TRY(std::string s, toDisplay(v));
      KVJ_CHECK(append(out, s));
      return Flow::kNormal;
    }
    case NodeKind::kIf: {
      KVJ_TRY(Value t, eval(*n.kids[0]));
      return execBlock(truthy(t) ? n.body : n.alt, out);
    }
    case NodeKind::kFor:
      return execFor(n, out);
    case NodeKind::kSet: {
      if (n.kids.size() > 1) {
        KVJ_CHECK(execSet(n));
        return Flow::kNormal;
      }
      std::string buf;
      KVJ_TRY(Flow f, execBlock(n.body, buf));
      if (f != Flow::kNormal) return f;
      KVJ_TRY(Value v, newString(std::move(buf)));
      KVJ_CHECK(bindTarget(*n.kids[0], v));
      return Flow::kNormal;
    }
    case NodeKind::kMacro: {
      if (!heap_.charge(1)) return jerr("template memory budget exceeded");
      Value v{Kind::kFunction};
      v.fn = heap_.newCallable(Callable{Builtin::kMacro, n.macro->name, {}, n.macro.get()});
      setVar(n.macro->name, v);
      return Flow::kNormal;
    }
    case NodeKind::kBreak:
      return Flow::kBreak;
    case NodeKind::kContinue:
      return Flow::kContinue;
    case NodeKind::kFilterBlock: {
      std::string buf;
      KVJ_TRY(Flow f, execBlock(n.body, buf));
      if (f != Flow::kNormal) return f;
      const Node& fnode = *n.kids[0];
      KVJ_TRY(Args args, evalArgs(fnode.kids, 1));
      KVJ_TRY(Value text, newString(std::move(buf)));
      KVJ_TRY(Value v, applyFilter(*this, fnode.name, text, args, fnode.flag, &fnode));
      if (v.isNull() || v.isUndefined()) return Flow::kNormal;
      KVJ_TRY(std::string s, toDisplay(v));
      KVJ_CHECK(append(out, s));
      return Flow::kNormal;
    }
    default:
      return jerr("line " + std::to_string(n.line) +
                  ": unexpected expression in statement position");
  }
}

Result<void> Interp::bindTarget(const Node& target, const Value& v) {
  if (target.kind == NodeKind::kIdent) {
    setVar(target.name, v);
    return {};
  }
  if (target.kind == NodeKind::kTuple) {
    if (!v.isArray())
      return jerr(std::string("Cannot unpack non-iterable type: ") + kindName(v.kind));
    if (v.arr->items.size() != target.kids.size()) {
      return jerr(std::string("Too ") +
                  (target.kids.size() > v.arr->items.size() ? "few" : "many") + " items to unpack");
    }
    for (size_t k = 0; k < target.kids.size(); ++k) {
      if (target.kids[k]->kind != NodeKind::kIdent)
        return jerr("Cannot unpack to a non-identifier");
    }
    for (size_t k = 0; k < target.kids.size(); ++k) setVar(target.kids[k]->name, v.arr->items[k]);
    return {};
  }
  return jerr("line " + std::to_string(target.line) + ": invalid assignment target");
}

Result<void> Interp::execSet(const Node& n) {
  KVJ_TRY(Value rhs, eval(*n.kids[1]));
  const Node& target = *n.kids[0];
  if (target.kind != NodeKind::kMember) return bindTarget(target, rhs);
  KVJ_TRY(Value obj, eval(*target.kids[0]));
  if (obj.kind != Kind::kNamespace) return jerr("cannot assign attribute on non-namespace object");
  if (target.flag || target.kids[1]->kind != NodeKind::kLiteral ||
      !target.kids[1]->lit.isString()) {
    return jerr("Cannot assign to member with non-identifier property");
  }
  if (!heap_.charge(1)) return jerr("template memory budget exceeded");
  obj.obj->set(target.kids[1]->lit.sv(), std::move(rhs));
  return {};
}

Result<Interp::Flow> Interp::execFor(const Node& n, std::string& out) {
  frames_.emplace_back();
  struct Pop {
    std::vector<Frame>& f;
    ~Pop() { f.pop_back(); }
  } pop{frames_};
  const Node& target = *n.kids[0];
  KVJ_TRY(Value iterable, eval(*n.kids[1]));
  std::vector<Value> items;
  switch (iterable.kind) {
    case Kind::kArray:
      items = iterable.arr->items;
      break;
    case Kind::kObject:
      for (const auto& [k, v] : iterable.obj->entries) items.push_back(Value::str(k));
      break;
    case Kind::kString:  // extension: @huggingface/jinja rejects strings, Python iterates
                         // characters
      for (auto cp : text::codePoints(iterable.sv())) items.push_back(Value::str(std::string(cp)));
      break;
    case Kind::kUndefined:
      break;  // extension: Python iterates an undefined value as empty
    default:
      return jerr(std::string("Expected iterable or object type in for loop: got ") +
                  kindName(iterable.kind));
  }
  if (!heap_.charge(items.size())) return jerr("template memory budget exceeded");
  if (target.kind == NodeKind::kTuple) {
    for (const auto& it : items) {
      if (!it.isArray())
        return jerr(std::string("Cannot unpack non-iterable type: ") + kindName(it.kind));
      if (it.arr->items.size() != target.kids.size()) {
        return jerr(std::string("Too ") +
                    (target.kids.size() > it.arr->items.size() ? "few" : "many") +
                    " items to unpack");
      }
    }
  }
  if (n.kids[2]->kind != NodeKind::kEmpty) {
    std::vector<Value> kept;
    for (const auto& it : items) {
      frames_.emplace_back();
      auto bound = bindTarget(target, it);
      auto keep = bound ? eval(*n.kids[2]) : Result<Value>(tl::unexpected(bound.error()));
      frames_.pop_back();
      if (!keep) return tl::unexpected(keep.error());
      if (truthy(*keep)) kept.push_back(it);
    }
    items = std::move(kept);
  }
  Value loop{Kind::kObject};
  loop.obj = heap_.newObject();
  if (!heap_.charge(9)) return jerr("template memory budget exceeded");
  const auto count = static_cast<int64_t>(items.size());
  bool no_iteration = true;
  for (int64_t i = 0; i < count; ++i) {
    KVJ_CHECK(step());
    Object& lo = *loop.obj;
    lo.set("index", Value::integer(i + 1));
    lo.set("index0", Value::integer(i));
    lo.set("revindex", Value::integer(count - i));
    lo.set("revindex0", Value::integer(count - i - 1));
    lo.set("first", Value::boolean(i == 0));
    lo.set("last", Value::boolean(i == count - 1));
    lo.set("length", Value::integer(count));
    lo.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value{});
    lo.set("nextitem", i < count - 1 ? items[static_cast<size_t>(i + 1)] : Value{});
    setVar("loop", loop);
    KVJ_CHECK(bindTarget(target, items[static_cast<size_t>(i)]));
    // @huggingface/jinja builds each iteration's text separately and drops it when break or
    // continue is raised inside it; Python Jinja2 keeps the text emitted before the break.
    size_t mark = out.size();
    KVJ_TRY(Flow f, execBlock(n.body, out));
    if (f == Flow::kBreak) {
      out.resize(mark);
      break;
    }
    if (f == Flow::kContinue) {
      out.resize(mark);
      continue;
    }
    no_iteration = false;  // HF quirk: only iterations that ran to completion count
  }
  if (no_iteration) return execBlock(n.alt, out);
  return Flow::kNormal;
}

Result<Args> Interp::evalArgs(const std::vector<NodePtr>& nodes, size_t first) {
  Args args;
  for (size_t k = first; k < nodes.size(); ++k) {
    if (nodes[k]->kind == NodeKind::kKwarg) continue;
    KVJ_TRY(Value v, eval(*nodes[k]));
    args.pos.push_back(std::move(v));
  }
  for (size_t k = first; k < nodes.size(); ++k) {
    if (nodes[k]->kind != NodeKind::kKwarg) continue;
    if (args.kwarg(nodes[k]->name)) {
      return jerr("Got multiple values for keyword argument '" + nodes[k]->name + "'");
    }
    KVJ_TRY(Value v, eval(*nodes[k]->kids[0]));
    args.kw.emplace_back(nodes[k]->name, std::move(v));
  }
  return args;
}

Result<Value> Interp::eval(const Node& n) {
  Counter c(depth_);
  if (depth_ > kMaxEvalDepth) return jerr("template nesting too deep");
  KVJ_CHECK(step());
  switch (n.kind) {
    case NodeKind::kLiteral:
      return n.lit;
    case NodeKind::kIdent:
      return lookup(n.name);
    case NodeKind::kEmpty:
      return Value{};
    case NodeKind::kArray:
    case NodeKind::kTuple: {
      std::vector<Value> items;
      for (const auto& k : n.kids) {
        KVJ_TRY(Value v, eval(*k));
        items.push_back(std::move(v));
      }
      KVJ_TRY(Value arr, newArray(std::move(items)));
      arr.arr->tuple = n.kind == NodeKind::kTuple;
      return arr;
    }
    case NodeKind::kObject: {
      if (!heap_.charge(n.kids.size() / 2 + 1)) return jerr("template memory budget exceeded");
      Value v{Kind::kObject};
      v.obj = heap_.newObject();
      for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
        KVJ_TRY(Value key, eval(*n.kids[k]));
        if (!key.isString())
          return jerr(std::string("Object keys must be strings: got ") + kindName(key.kind));
        KVJ_TRY(Value val, eval(*n.kids[k + 1]));
        v.obj->set(key.sv(), std::move(val));
      }
      return v;
    }
    case NodeKind::kMember:
      return evalMember(n);
    case NodeKind::kCall:
      return evalCall(n);
    case NodeKind::kBinary:
      return evalBinary(n);
    case NodeKind::kUnary: {
      KVJ_TRY(Value a, eval(*n.kids[0]));
      if (n.name == "not") return Value::boolean(!truthy(a));
      bool neg = n.name == "-";
      if (a.kind == Kind::kFloat) return Value::real(neg ? -a.f : a.f);
      if (a.kind == Kind::kInt || a.kind == Kind::kBool) {
        int64_t x = a.kind == Kind::kBool ? a.b : a.i;
        if (neg && x == std::numeric_limits<int64_t>::min()) return jerr("integer overflow");
        return Value::integer(neg ? -x : x);
      }
      return jerr("Unknown operator \"" + n.name + "\" for " + kindName(a.kind));
    }
    case NodeKind::kFilter: {
      KVJ_TRY(Value operand, eval(*n.kids[0]));
      KVJ_TRY(Args args, evalArgs(n.kids, 1));
      return applyFilter(*this, n.name, operand, args, n.flag, &n);
    }
    case NodeKind::kTest: {
      KVJ_TRY(Value operand, eval(*n.kids[0]));
      KVJ_TRY(Args args, evalArgs(n.kids, 1));
      KVJ_TRY(bool r, applyTest(*this, n.name, operand, args));
      return Value::boolean(n.flag ? !r : r);
    }
    case NodeKind::kSelect: {
      KVJ_TRY(Value cond, eval(*n.kids[1]));
      if (!truthy(cond)) return Value{};
      return eval(*n.kids[0]);
    }
    case NodeKind::kTernary: {
      KVJ_TRY(Value cond, eval(*n.kids[0]));
      return eval(*n.kids[truthy(cond) ? 1 : 2]);
    }
    default:
      return jerr("line " + std::to_string(n.line) +
                  ": unexpected statement in expression position");
  }
}

Result<Value> Interp::call(const Value& fn, const Args& args) {
  if (fn.kind != Kind::kFunction) {
    return jerr(std::string("Cannot call something that is not a function: got ") +
                kindName(fn.kind));
  }
  const Callable& c = *fn.fn;
  switch (c.kind) {
    case Builtin::kMethod:
      return callMethod(*this, c.self, c.name, args);
    case Builtin::kMacro:
      return callMacro(*c.macro, args);
    default:
      return callGlobal(*this, c.kind, args);
  }
}

Result<Value> Interp::callMacro(const MacroDef& m, const Args& args) {
  Counter calls(call_depth_);
  if (call_depth_ > kMaxCallDepth) return jerr("macro calls nested deeper than 64 levels");
  frames_.emplace_back();
  struct Pop {
    std::vector<Frame>& f;
    ~Pop() { f.pop_back(); }
  } pop{frames_};
  std::vector<std::pair<std::string, Value>> kw = args.kw;
  std::vector<const Node*> pending;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const Node& p = *m.params[i];
    Value v;
    bool have = false;
    if (i < args.pos.size()) {
      v = args.pos[i];
      have = true;
    } else {
      for (auto it = kw.begin(); it != kw.end(); ++it) {
        if (it->first == p.name) {
          v = it->second;
          have = true;
          kw.erase(it);
          break;
        }
      }
    }
    if (!have && p.kind == NodeKind::kKwarg) pending.push_back(&p);
    setVar(p.name, v);
  }
  if (m.uses_kwargs) {
    Value o{Kind::kObject};
    o.obj = heap_.newObject();
    for (auto& [k, v] : kw) o.obj->set(k, v);
    setVar("kwargs", o);
  } else if (!kw.empty()) {
    return jerr("macro '" + m.name + "' takes no keyword argument '" + kw.front().first + "'");
  }
  if (m.uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = m.params.size(); i < args.pos.size(); ++i) rest.push_back(args.pos[i]);
    KVJ_TRY(Value r, newArray(std::move(rest)));
    setVar("varargs", r);
  } else if (args.pos.size() > m.params.size()) {
    return jerr("macro '" + m.name + "' takes not more than " + std::to_string(m.params.size()) +
                " argument(s)");
  }
  for (const Node* p : pending) {
    KVJ_TRY(Value v, eval(*p->kids[0]));
    setVar(p->name, v);
  }
  std::string out;
  KVJ_TRY(Flow f, execBlock(m.body, out));
  // HF lets break/continue escape a macro into the caller's loop; we reject it.
  if (f != Flow::kNormal) return jerr("break/continue inside a macro outside of a loop");
  return newString(std::move(out));
}

Result<Value> Interp::applyFilterByName(const std::string& name, const Value& operand,
                                        const Args& args, bool call_form) {
  return applyFilter(*this, name, operand, args, call_form, nullptr);
}

}  // namespace kvgate::jinja
