// Filters (`x | name(args)`) with @huggingface/jinja 0.5.11 semantics, including its quirks:
// `int` floors floats, the call forms `int(d)`/`float(d)` return numbers unchanged, `join` uses
// JS String() of the items, `string`/printing use JSON-style lists and dicts, `selectattr` looks up
// plain keys. Filters HF lacks (select, reject, sum, min, max, round, batch, wordcount, escape,
// count, d, map with a filter name) follow Python Jinja2 as extensions.
#include <algorithm>
#include <cmath>
#include <optional>

#include "tokenizer/jinja/convert.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text.h"

namespace kvgate::jinja {
namespace {

tl::unexpected<Error> cannot(const std::string& name, const Value& v) {
  return jerr("Cannot apply filter \"" + name + "\" to type: " + kindName(v.kind));
}

// getAttributeValue(): dotted path through dicts/namespaces and list indexes.
Value attributePath(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.isContainer()) {
      const Value* v = cur.obj->find(part);
      cur = v ? *v : Value{};
    } else if (cur.isArray()) {
      bool ok = false;
      int64_t idx = text::jsParseInt(part, ok);
      if (!ok || idx < 0 || idx >= static_cast<int64_t>(cur.arr->items.size())) return Value{};
      cur = cur.arr->items[static_cast<size_t>(idx)];
    } else {
      return Value{};
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Result<bool> boolArg(const Args& args, size_t i, std::string_view name, bool dflt) {
  const Value* v = args.get(i, name);
  if (!v) return dflt;
  if (v->kind != Kind::kBool) return jerr(std::string(name) + " must be a boolean");
  return v->b;
}

Result<Value> sortFilter(Interp& in, const Value& operand, const Args& args) {
  KVJ_TRY(bool reverse, boolArg(args, 0, "reverse", false));
  KVJ_TRY(bool cs, boolArg(args, 1, "case_sensitive", false));
  const Value* attr = args.get(2, "attribute");
  if (attr && !attr->isString() && attr->kind != Kind::kInt && !attr->isNull()) {
    return jerr("attribute must be a string, integer, or null");
  }
  std::string path;
  bool by_attr = attr && !attr->isNull();
  if (by_attr) path = attr->isString() ? attr->sv() : std::to_string(attr->i);
  std::vector<Value> items = operand.arr->items;
  KVJ_CHECK(in.step(items.size() * 8));
  std::optional<Error> failure;
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    if (failure) return false;
    auto c = by_attr ? compareValues(attributePath(a, path), attributePath(b, path), cs)
                     : compareValues(a, b, cs);
    if (!c) {
      failure = c.error();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (failure) return tl::unexpected(*failure);
  return in.newArray(std::move(items));
}

Result<Value> tojsonFilter(Interp& in, const Value& operand, const Args& args) {
  JsonOptions opt;
  const Value* indent = args.kwarg("indent");
  if (!indent && !args.pos.empty()) indent = &args.pos[0];  // extension: Python allows tojson(2)
  if (indent && indent->kind != Kind::kInt && !indent->isNull())
    return jerr("If set, indent must be a number");
  if (indent && indent->kind == Kind::kInt) opt.indent = indent->i;
  KVJ_TRY(opt.ensure_ascii, boolArg(Args{{}, args.kw}, 99, "ensure_ascii", false));
  KVJ_TRY(opt.sort_keys, boolArg(Args{{}, args.kw}, 99, "sort_keys", false));
  if (const Value* sep = args.kwarg("separators"); sep && !sep->isNull()) {
    if (!sep->isArray() || sep->arr->items.size() != 2 || !sep->arr->items[0].isString() ||
        !sep->arr->items[1].isString()) {
      return jerr("separators must be a tuple of two strings");
    }
    opt.separators = std::make_pair(sep->arr->items[0].sv(), sep->arr->items[1].sv());
  }
  KVJ_TRY(std::string s, toJson(operand, opt));
  return in.newString(std::move(s));
}

Result<Value> joinFilter(Interp& in, const std::string& name, const Value& operand,
                         const Args& args) {
  const Value* sep = args.get(0, "separator");
  if (!sep) sep = args.kwarg("d");
  if (sep && !sep->isString()) return jerr("separator must be a string");
  std::string d = sep ? sep->sv() : "";
  std::string out;
  if (operand.isString()) {
    auto cps = text::codePoints(operand.sv());
    for (size_t k = 0; k < cps.size(); ++k) {
      if (k) out += d;
      out.append(cps[k]);
    }
  } else if (operand.isArray()) {
    const Value* attr = args.kwarg("attribute");  // extension
    for (size_t k = 0; k < operand.arr->items.size(); ++k) {
      if (k) out += d;
      Value item = attr && attr->isString() ? attributePath(operand.arr->items[k], attr->sv())
                                            : operand.arr->items[k];
      if (item.isNull() || item.isUndefined()) continue;  // Array.prototype.join
      KVJ_TRY(std::string s, jsString(item));
      out += s;
      if (out.size() > kMaxOutputBytes) return jerr("string exceeds the output size limit");
    }
  } else {
    return cannot(name, operand);
  }
  return in.newString(std::move(out));
}

Result<Value> numberFilter(const std::string& name, const Value& operand, const Args& args,
                           bool call_form) {
  bool to_int = name == "int";
  if (operand.kind == Kind::kBool)
    return to_int ? Value::integer(operand.b) : Value::real(operand.b);
  if (operand.isString()) {
    bool ok = false;
    Value parsed = to_int ? Value::integer(text::jsParseInt(operand.sv(), ok))
                          : Value::real(text::jsParseFloat(operand.sv(), ok));
    if (ok) return parsed;
    if (call_form) {
      if (const Value* d = args.get(0, "default")) return *d;
    }
    return to_int ? Value::integer(0) : Value::real(0);
  }
  if (operand.isNumber()) {
    if (call_form) return operand;  // HF returns numbers unchanged from int(...)/float(...)
    if (!to_int) return Value::real(operand.num());
    if (operand.kind == Kind::kInt) return operand;
    double fl = std::floor(operand.f);  // HF floors; Python int() truncates toward zero
    if (!std::isfinite(fl) || std::fabs(fl) > 9.2e18)
      return jerr("cannot convert float to integer");
    return Value::integer(static_cast<int64_t>(fl));
  }
  return cannot(name, operand);
}

Result<Value> selectFilter(Interp& in, const std::string& name, const Value& operand,
                           const Args& args) {
  bool by_attr = name == "selectattr" || name == "rejectattr";
  bool keep_when = name == "selectattr" || name == "select";
  size_t first_test = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) {
    for (const auto& item : operand.arr->items) {
      if (!item.isContainer())
        return jerr("`" + name + "` can only be applied to array of objects");
    }
    if (args.pos.empty() || !args.pos[0].isString())
      return jerr("arguments of `" + name + "` must be strings");
    attr = args.pos[0].sv();
  }
  std::string test;
  if (args.pos.size() > first_test) {
    if (!args.pos[first_test].isString()) return jerr("test name must be a string");
    test = args.pos[first_test].sv();
  }
  Args test_args;
  for (size_t k = first_test + 1; k < args.pos.size(); ++k) test_args.pos.push_back(args.pos[k]);
  std::vector<Value> kept;
  for (const auto& item : operand.arr->items) {
    KVJ_CHECK(in.step());
    bool result = false;
    if (by_attr) {
      const Value* a = item.obj->find(attr);  // HF: plain key; a missing key never passes the test
      if (a) {
        if (test.empty())
          result = truthy(*a);
        else {
          KVJ_TRY(result, applyTest(in, test, *a, test_args));
        }
      }
    } else if (test.empty()) {
      result = truthy(item);
    } else {
      KVJ_TRY(result, applyTest(in, test, item, test_args));
    }
    if (result == keep_when) kept.push_back(item);
  }
  return in.newArray(std::move(kept));
}

Result<Value> mapFilter(Interp& in, const Value& operand, const Args& args) {
  std::vector<Value> out;
  if (const Value* attr = args.kwarg("attribute")) {
    if (!attr->isString()) return jerr("attribute must be a string");
    const Value* dflt = args.kwarg("default");
    for (const auto& item : operand.arr->items) {
      if (!item.isContainer()) return jerr("items in map must be an object");
      Value v = attributePath(item, attr->sv());
      out.push_back(v.isUndefined() && dflt ? *dflt : v);
    }
    return in.newArray(std::move(out));
  }
  // Extension (Python): map('filter', args...)
  if (args.pos.empty() || !args.pos[0].isString()) {
    return jerr("`map` expressions without `attribute` set are not currently supported.");
  }
  Args rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const auto& item : operand.arr->items) {
    KVJ_TRY(Value v, in.applyFilterByName(args.pos[0].sv(), item, rest,
                                          !rest.pos.empty() || !rest.kw.empty()));
    out.push_back(v);
  }
  return in.newArray(std::move(out));
}

Result<Value> reduceFilter(Interp& in, const std::string& name, const Value& operand,
                           const Args& args) {
  const Value* attr = args.kwarg("attribute");
  std::vector<Value> items;
  for (const auto& it : operand.arr->items) {
    items.push_back(attr && attr->isString() ? attributePath(it, attr->sv()) : it);
  }
  if (name == "sum") {
    Value acc = args.kwarg("start") ? *args.kwarg("start") : Value::integer(0);
    for (const auto& v : items) {
      if (!acc.isNumber() || !(v.isNumber() || v.kind == Kind::kBool))
        return jerr("sum() needs numbers");
      if (acc.kind == Kind::kInt && v.kind != Kind::kFloat) {
        int64_t add = v.kind == Kind::kBool ? v.b : v.i;
        if (__builtin_add_overflow(acc.i, add, &acc.i)) return jerr("integer overflow");
      } else {
        acc = Value::real(acc.num() + v.num());
      }
    }
    return acc;
  }
  KVJ_TRY(bool cs, boolArg(args, 0, "case_sensitive", false));
  if (items.empty()) return Value{};
  size_t best = 0;
  for (size_t k = 1; k < items.size(); ++k) {
    KVJ_TRY(int c, compareValues(items[k], items[best], cs));
    if (name == "min" ? c < 0 : c > 0) best = k;
  }
  (void)in;
  return attr ? operand.arr->items[best] : items[best];
}

std::string htmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

Result<Value> applyFilter(Interp& in, const std::string& name, const Value& operand,
                          const Args& args, bool call_form, const Node* node) {
  KVJ_CHECK(in.step());
  (void)node;
  if (name == "safe") return operand;
  if (name == "tojson") return tojsonFilter(in, operand, args);
  if (name == "default" || name == "d") {
    const Value* dflt = args.get(0, "default_value");
    KVJ_TRY(bool boolean, boolArg(args, 1, "boolean", false));
    if (operand.isUndefined() || (boolean && !truthy(operand)))
      return dflt ? *dflt : Value::str("");
    return operand;
  }
  if (operand.isUndefined() || operand.isNull() || operand.kind == Kind::kFunction)
    return cannot(name, operand);
  if (name == "join") return joinFilter(in, name, operand, args);
  if (name == "int" || name == "float") return numberFilter(name, operand, args, call_form);
  if (name == "length" || name == "count") {
    if (operand.isArray()) return Value::integer(static_cast<int64_t>(operand.arr->items.size()));
    // Python len(): code points (@huggingface/jinja counts UTF-16 units).
    if (operand.isString())
      return Value::integer(static_cast<int64_t>(text::codePointLength(operand.sv())));
    if (operand.isObject())
      return Value::integer(static_cast<int64_t>(operand.obj->entries.size()));
    return cannot(name, operand);
  }
  if (name == "string") {
    if (operand.isString()) return operand;
    KVJ_TRY(std::string s, toDisplay(operand));
    return in.newString(std::move(s));
  }
  if (name == "escape" || name == "e") {
    KVJ_TRY(std::string s, toDisplay(operand));
    return in.newString(htmlEscape(s));
  }
  if (operand.isArray()) {
    const auto& items = operand.arr->items;
    if (name == "list") return operand;
    if (name == "first") return items.empty() ? Value{} : items.front();
    if (name == "last") return items.empty() ? Value{} : items.back();
    if (name == "reverse") return in.newArray(std::vector<Value>(items.rbegin(), items.rend()));
    if (name == "sort") return sortFilter(in, operand, args);
    if (name == "unique") {
      std::vector<Value> kept;
      for (const auto& x : items) {
        KVJ_CHECK(in.step(kept.size() + 1));
        bool seen = false;
        for (const auto& k : kept)
          if (strictEquals(k, x)) {
            seen = true;
            break;
          }
        if (!seen) kept.push_back(x);
      }
      return in.newArray(std::move(kept));
    }
    if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
      return selectFilter(in, name, operand, args);
    }
    if (name == "map") return mapFilter(in, operand, args);
    if (name == "sum" || name == "min" || name == "max")
      return reduceFilter(in, name, operand, args);
    if (name == "batch") {
      const Value* n = args.get(0, "linecount");
      if (!n || n->kind != Kind::kInt || n->i <= 0) return jerr("batch() needs a positive integer");
      const Value* fill = args.get(1, "fill_with");
      std::vector<Value> out;
      for (size_t k = 0; k < items.size(); k += static_cast<size_t>(n->i)) {
        std::vector<Value> row(items.begin() + static_cast<std::ptrdiff_t>(k),
                               items.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                   items.size(), k + static_cast<size_t>(n->i))));
        while (fill && !fill->isNull() && row.size() < static_cast<size_t>(n->i))
          row.push_back(*fill);
        KVJ_TRY(Value r, in.newArray(std::move(row)));
        out.push_back(r);
      }
      return in.newArray(std::move(out));
    }
    return jerr("Unknown ArrayValue filter: " + name);
  }
  if (operand.isString()) {
    const std::string& s = operand.sv();
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      return callMethod(in, operand, name, Args{});
    }
    if (name == "trim") {
      const Value* chars = args.get(0, "chars");
      // Jinja2's trim is Python str.strip(chars): Python whitespace by default.
      if (!chars || chars->isNull()) return in.newString(text::pyStrip(s, nullptr, true, true));
      if (!chars->isString()) return jerr("trim() chars must be a string");
      std::string cs(chars->sv());
      return in.newString(text::pyStrip(s, &cs, true, true));
    }
    if (name == "replace") return callMethod(in, operand, "replace", args);
    if (name == "indent") {
      const Value* width = args.get(0, "width");
      if (width && width->kind != Kind::kInt) return jerr("width must be a number");
      int64_t w = width ? std::clamp<int64_t>(width->i, 0, 1024) : 4;
      const Value* first = args.get(1, "first");
      const Value* blank = args.get(2, "blank");
      bool f = first && truthy(*first), bl = blank && truthy(*blank);
      std::string pad(static_cast<size_t>(w), ' '), out;
      size_t start = 0, line = 0;
      while (true) {
        size_t nl = s.find('\n', start);
        std::string_view part = std::string_view(s).substr(
            start, nl == std::string::npos ? std::string::npos : nl - start);
        if (!((!f && line == 0) || (!bl && part.empty()))) out += pad;
        out.append(part);
        if (out.size() > kMaxOutputBytes) return jerr("string exceeds the output size limit");
        if (nl == std::string::npos) break;
        out += '\n';
        start = nl + 1;
        ++line;
      }
      return in.newString(std::move(out));
    }
    auto cps = text::codePoints(s);  // extensions below
    if (name == "first") return cps.empty() ? Value{} : Value::str(std::string(cps.front()));
    if (name == "last") return cps.empty() ? Value{} : Value::str(std::string(cps.back()));
    if (name == "reverse") {
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out.append(*it);
      return in.newString(std::move(out));
    }
    if (name == "list") {
      std::vector<Value> out;
      for (auto cp : cps) out.push_back(Value::str(std::string(cp)));
      return in.newArray(std::move(out));
    }
    if (name == "wordcount") {
      int64_t words = 0;
      bool in_word = false;
      for (char c : s) {
        bool w = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || (static_cast<unsigned char>(c) >= 0x80);
        if (w && !in_word) ++words;
        in_word = w;
      }
      return Value::integer(words);
    }
    return jerr("Unknown StringValue filter: " + name);
  }
  if (operand.isNumber()) {
    if (name == "abs") {
      if (operand.kind == Kind::kFloat) return Value::real(std::fabs(operand.f));
      if (operand.i == INT64_MIN) return jerr("integer overflow");
      return Value::integer(operand.i < 0 ? -operand.i : operand.i);
    }
    if (name == "round") {  // extension (Python): returns a float
      const Value* prec = args.get(0, "precision");
      const Value* method = args.get(1, "method");
      int64_t p = prec && prec->kind == Kind::kInt ? std::clamp<int64_t>(prec->i, -20, 20) : 0;
      std::string m = method && method->isString() ? method->sv() : "common";
      double scale = std::pow(10.0, static_cast<double>(p)), x = operand.num() * scale;
      double r = m == "ceil" ? std::ceil(x) : m == "floor" ? std::floor(x) : std::round(x);
      return Value::real(r / scale);
    }
    return jerr("Unknown NumericValue filter: " + name);
  }
  if (operand.isObject()) {
    if (name == "items" || name == "keys" || name == "values" || name == "dictsort") {
      return callMethod(in, operand, name, args);
    }
    if (name == "list") return callMethod(in, operand, "keys", Args{});  // extension
    return jerr("Unknown ObjectValue filter: " + name);
  }
  if (operand.kind == Kind::kBool && name == "bool") return operand;
  return cannot(name, operand);
}

}  // namespace kvgate::jinja
