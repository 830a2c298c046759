// Expression evaluation that is not control flow: binary operators (arithmetic, comparison,
// `in`, `~`, with @huggingface/jinja's coercions), slices, member access and calls.
#include <cmath>
#include <limits>

#include "tokenizer/jinja/convert.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text.h"

namespace kvgate::jinja {
namespace {

tl::unexpected<Error> opError(const std::string& op, const Value& a, const Value& b) {
  return jerr("Unknown operator \"" + op + "\" between " + kindName(a.kind) + " and " +
              kindName(b.kind));
}

}  // namespace

Result<Value> Interp::evalBinary(const Node& n) {
  const std::string& op = n.name;
  KVJ_TRY(Value a, eval(*n.kids[0]));
  if (op == "and") return truthy(a) ? eval(*n.kids[1]) : Result<Value>(a);
  if (op == "or") return truthy(a) ? Result<Value>(a) : eval(*n.kids[1]);
  KVJ_TRY(Value b, eval(*n.kids[1]));
  if (op == "==") return Value::boolean(looseEquals(a, b));
  if (op == "!=") return Value::boolean(!looseEquals(a, b));
  bool is_in = op == "in" || op == "not in";
  if (a.isUndefined() || b.isUndefined()) {
    if (b.isUndefined() && is_in) return Value::boolean(op == "not in");
    return jerr("Cannot perform operation " + op + " on undefined values");
  }
  if (a.isNull() || b.isNull()) return jerr("Cannot perform operation on null values");
  if (op == "~") {
    KVJ_TRY(std::string x, jsString(a));
    KVJ_TRY(std::string y, jsString(b));
    return newString(x + y);
  }
  auto numeric_like = [](const Value& v) { return v.isNumber() || v.kind == Kind::kBool; };
  if (op == "**" && numeric_like(a) && numeric_like(b)) {
    double x = a.num(), y = b.num();
    if (x == 0 && y < 0) return jerr("0.0 cannot be raised to a negative power");
    bool is_float = a.kind == Kind::kFloat || b.kind == Kind::kFloat || y < 0;
    double r = std::pow(x, y);
    if (!std::isfinite(r)) return jerr("Exponentiation result is not a finite real number");
    if (is_float) return Value::real(r);
    int64_t base = a.kind == Kind::kBool ? a.b : a.i, e = b.kind == Kind::kBool ? b.b : b.i,
            acc = 1;
    while (e > 0) {
      if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) return jerr("integer overflow");
      e >>= 1;
      if (e > 0 && __builtin_mul_overflow(base, base, &base)) return jerr("integer overflow");
    }
    return Value::integer(acc);
  }
  if (a.isNumber() && b.isNumber()) {
    bool ints = a.kind == Kind::kInt && b.kind == Kind::kInt;
    if (op == "+" || op == "-" || op == "*") {
      if (ints) {
        int64_t r = 0;
        bool ovf = op == "+"   ? __builtin_add_overflow(a.i, b.i, &r)
                   : op == "-" ? __builtin_sub_overflow(a.i, b.i, &r)
                               : __builtin_mul_overflow(a.i, b.i, &r);
        if (ovf) return jerr("integer overflow");
        return Value::integer(r);
      }
      double x = a.num(), y = b.num();
      return Value::real(op == "+" ? x + y : op == "-" ? x - y : x * y);
    }
    if (op == "/") return Value::real(a.num() / b.num());
    if (op == "//" || op == "%") {
      if (!ints) {
        double x = a.num(), y = b.num();
        return Value::real(op == "//" ? std::floor(x / y) : std::fmod(x, y));
      }
      // @huggingface/jinja yields Infinity/NaN here; an integer cannot hold them.
      if (b.i == 0) return jerr("integer division or modulo by zero");
      if (b.i == -1) {
        if (op == "%") return Value::integer(0);
        if (a.i == std::numeric_limits<int64_t>::min()) return jerr("integer overflow");
        return Value::integer(-a.i);
      }
      if (op == "%") return Value::integer(a.i % b.i);  // JS remainder: sign of the dividend
      int64_t q = a.i / b.i;
      if ((a.i % b.i != 0) && ((a.i < 0) != (b.i < 0))) --q;
      return Value::integer(q);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c = ints ? (a.i < b.i   ? -1
                      : a.i > b.i ? 1
                                  : 0)
                   : (a.num() < b.num()    ? -1
                      : a.num() > b.num()  ? 1
                      : a.num() == b.num() ? 0
                                           : 2);
      if (c == 2) return Value::boolean(false);  // NaN
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
  } else if (a.isArray() && b.isArray()) {
    if (op == "+") {
      std::vector<Value> items = a.arr->items;
      items.insert(items.end(), b.arr->items.begin(), b.arr->items.end());
      return newArray(std::move(items));
    }
  } else if (b.isArray() && is_in) {
    bool found = false;
    for (const auto& x : b.arr->items)
      if (strictEquals(x, a)) {
        found = true;
        break;
      }
    return Value::boolean(op == "in" ? found : !found);
  }
  if ((a.isString() || b.isString()) && op == "+") {
    KVJ_TRY(std::string x, jsString(a));
    KVJ_TRY(std::string y, jsString(b));
    return newString(x + y);
  }
  if (a.isString() && b.isString() && is_in) {
    bool found = b.sv().find(a.sv()) != std::string::npos;
    return Value::boolean(op == "in" ? found : !found);
  }
  if (a.isString() && b.isObject() && is_in) {
    bool found = b.obj->find(a.sv()) != nullptr;
    return Value::boolean(op == "in" ? found : !found);
  }
  return opError(op, a, b);
}

Result<Value> Interp::evalSlice(const Value& obj, const Node& slice) {
  if (!obj.isArray() && !obj.isString()) return jerr("Slice object must be an array or string");
  int64_t parts[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    KVJ_TRY(Value v, eval(*slice.kids[static_cast<size_t>(k)]));
    if (v.kind == Kind::kInt) {
      parts[k] = v.i;
      given[k] = true;
    } else if (!v.isUndefined())
      return jerr("Slice indices must be integers or undefined");
  }
  std::vector<std::string_view> chars;
  if (obj.isString()) chars = text::codePoints(obj.sv());
  const __int128 len = obj.isArray() ? static_cast<__int128>(obj.arr->items.size())
                                     : static_cast<__int128>(chars.size());
  __int128 step = parts[2];
  int dir = step > 0 ? 1 : step < 0 ? -1 : 0;
  __int128 start, stop;
  if (dir >= 0) {
    start = !given[0]      ? 0
            : parts[0] < 0 ? std::max<__int128>(len + parts[0], 0)
                           : std::min<__int128>(parts[0], len);
    stop = !given[1]      ? len
           : parts[1] < 0 ? std::max<__int128>(len + parts[1], 0)
                          : std::min<__int128>(parts[1], len);
  } else {
    start = !given[0]      ? len - 1
            : parts[0] < 0 ? std::max<__int128>(len + parts[0], -1)
                           : std::min<__int128>(parts[0], len - 1);
    stop = !given[1]       ? -1
           : parts[1] < -1 ? std::max<__int128>(len + parts[1], -1)
                           : std::min<__int128>(parts[1], len - 1);
  }
  std::vector<Value> items;
  std::string s;
  for (__int128 i = start; dir * i < dir * stop; i += step) {
    auto idx = static_cast<size_t>(i);
    if (obj.isArray())
      items.push_back(obj.arr->items[idx]);
    else
      s.append(chars[idx]);
  }
  if (obj.isArray()) return newArray(std::move(items));
  return newString(std::move(s));
}

Result<Value> Interp::evalMember(const Node& n) {
  KVJ_TRY(Value obj, eval(*n.kids[0]));
  const Node& prop_node = *n.kids[1];
  if (prop_node.kind == NodeKind::kSlice) return evalSlice(obj, prop_node);
  KVJ_TRY(Value prop, eval(prop_node));
  if (obj.isUndefined()) return Value{};  // extension: HF errors on undefined[int]
  auto bound = [&](const std::string& name) -> Result<Value> {
    if (!heap_.charge(1)) return jerr("template memory budget exceeded");
    Value f{Kind::kFunction};
    f.fn = heap_.newCallable(Callable{Builtin::kMethod, name, obj, nullptr});
    return f;
  };
  if (obj.isContainer()) {
    if (!prop.isString())
      return jerr(std::string("Cannot access property with non-string: got ") +
                  kindName(prop.kind));
    if (const Value* v = obj.obj->find(prop.sv())) return *v;
    if (obj.isObject() && isMethodName(obj, prop.sv())) return bound(prop.sv());
    return Value{};
  }
  if (obj.isArray() || obj.isString()) {
    if (prop.kind == Kind::kInt) {
      if (obj.isArray()) {
        auto size = static_cast<int64_t>(obj.arr->items.size());
        int64_t i = prop.i < 0 ? prop.i + size : prop.i;
        if (i < 0 || i >= size) return Value{};
        return obj.arr->items[static_cast<size_t>(i)];
      }
      // HF indexes UTF-16 units; we index code points (same for text without astral characters).
      auto cps = text::codePoints(obj.sv());
      auto size = static_cast<int64_t>(cps.size());
      int64_t i = prop.i < 0 ? prop.i + size : prop.i;
      if (i < 0 || i >= size) return Value{};
      return Value::str(std::string(cps[static_cast<size_t>(i)]));
    }
    if (prop.isString()) {
      if (prop.sv() == "length") {
        return Value::integer(static_cast<int64_t>(obj.isArray() ? obj.arr->items.size()
                                                                 : text::utf16Length(obj.sv())));
      }
      if (isMethodName(obj, prop.sv())) return bound(prop.sv());
      return Value{};
    }
    return jerr(std::string("Cannot access property with non-string/non-number: got ") +
                kindName(prop.kind));
  }
  if (!prop.isString())
    return jerr(std::string("Cannot access property with non-string: got ") + kindName(prop.kind));
  return Value{};
}

Result<Value> Interp::evalCall(const Node& n) {
  KVJ_TRY(Args args, evalArgs(n.kids, 1));
  const Node& callee = *n.kids[0];
  // Fast path for `obj.method(...)`: no bound-method allocation.
  if (callee.kind == NodeKind::kMember && callee.kids[1]->kind == NodeKind::kLiteral &&
      callee.kids[1]->lit.isString()) {
    KVJ_TRY(Value obj, eval(*callee.kids[0]));
    const std::string& name = callee.kids[1]->lit.sv();
    bool shadowed = obj.isContainer() && obj.obj->find(name) != nullptr;
    if (!shadowed && (obj.isString() || obj.isArray() || obj.isObject()) &&
        isMethodName(obj, name)) {
      return callMethod(*this, obj, name, args);
    }
  }
  KVJ_TRY(Value fn, eval(callee));
  return call(fn, args);
}

}  // namespace kvgate::jinja
