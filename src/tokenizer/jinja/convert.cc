// Value conversions, printing, tojson and comparisons (see convert.h), plus the Heap/Object basics.
#include "tokenizer/jinja/convert.h"

#include <algorithm>
#include <cmath>

#include "common/json_escape.h"
#include "tokenizer/jinja/text.h"

namespace kvgate::jinja {

Array* Heap::newArray(size_t reserve) {
  arrays_.emplace_back();
  arrays_.back().items.reserve(std::min<size_t>(reserve, 1024));
  return &arrays_.back();
}
Object* Heap::newObject() {
  objects_.emplace_back();
  return &objects_.back();
}
const Callable* Heap::newCallable(Callable c) {
  callables_.push_back(std::move(c));
  return &callables_.back();
}

const Value* Object::find(std::string_view key) const {
  if (!index.empty()) {
    auto it = index.find(std::string(key));
    return it == index.end() ? nullptr : &entries[it->second].second;
  }
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

void Object::set(const std::string& key, Value v) {
  if (!index.empty()) {
    auto it = index.find(key);
    if (it != index.end()) {
      entries[it->second].second = std::move(v);
      return;
    }
  } else {
    for (auto& [k, old] : entries)
      if (k == key) {
        old = std::move(v);
        return;
      }
  }
  entries.emplace_back(key, std::move(v));
  if (entries.size() > 16) {
    if (index.empty()) {
      for (size_t n = 0; n < entries.size(); ++n) index.emplace(entries[n].first, n);
    } else {
      index.emplace(key, entries.size() - 1);
    }
  }
}

const char* kindName(Kind k) {
  switch (k) {
    case Kind::kUndefined:
      return "UndefinedValue";
    case Kind::kNull:
      return "NullValue";
    case Kind::kBool:
      return "BooleanValue";
    case Kind::kInt:
      return "IntegerValue";
    case Kind::kFloat:
      return "FloatValue";
    case Kind::kString:
      return "StringValue";
    case Kind::kArray:
      return "ArrayValue";
    case Kind::kObject:
      return "ObjectValue";
    case Kind::kNamespace:
      return "NamespaceValue";
    case Kind::kFunction:
      return "FunctionValue";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNull:
      return false;
    case Kind::kBool:
      return v.b;
    case Kind::kInt:
      return v.i != 0;
    case Kind::kFloat:
      return v.f != 0 && !std::isnan(v.f);
    case Kind::kString:
      return !v.s->empty();
    case Kind::kArray:
      return !v.arr->items.empty();
    case Kind::kObject:
      return !v.obj->entries.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;  // JS: !!Map, !!function
  }
  return false;
}

Result<Value> fromJson(const nlohmann::ordered_json& j, Heap& heap, int depth) {
  if (depth > kMaxValueDepth) return jerr("context nested too deeply");
  using T = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case T::null:
    case T::discarded:
      return Value::null();
    case T::boolean:
      return Value::boolean(j.get<bool>());
    case T::number_integer:
      return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      auto u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::real(static_cast<double>(u));
    }
    case T::number_float: {
      // JS has one number type: convertToRuntimeValues() makes integral floats IntegerValues,
      // so a context value 2.0 prints as "2" (Python would print "2.0").
      double d = j.get<double>();
      if (std::isfinite(d) && std::fmod(d, 1.0) == 0 && std::fabs(d) < 9.2e18) {
        return Value::integer(static_cast<int64_t>(d));
      }
      return Value::real(d);
    }
    case T::string:
      return Value::str(j.get_ref<const std::string&>());
    case T::binary:
      return jerr("binary values are not supported in the context");
    case T::array: {
      if (!heap.charge(j.size())) return jerr("template memory budget exceeded");
      Value v{Kind::kArray};
      v.arr = heap.newArray(j.size());
      for (const auto& e : j) {
        KVJ_TRY(Value x, fromJson(e, heap, depth + 1));
        v.arr->items.push_back(std::move(x));
      }
      return v;
    }
    case T::object: {
      if (!heap.charge(j.size())) return jerr("template memory budget exceeded");
      Value v{Kind::kObject};
      v.obj = heap.newObject();
      for (auto it = j.begin(); it != j.end(); ++it) {
        KVJ_TRY(Value x, fromJson(it.value(), heap, depth + 1));
        v.obj->set(it.key(), std::move(x));
      }
      return v;
    }
  }
  return Value::null();
}

Result<std::string> toDisplay(const Value& v, int depth) {
  switch (v.kind) {
    case Kind::kFloat:
      return text::floatRepr(v.f);
    case Kind::kArray:
    case Kind::kObject:
    case Kind::kNamespace: {
      JsonOptions opt;
      opt.undefined_as_null = false;
      return toJson(v, opt, depth);
    }
    // @huggingface/jinja prints a macro's JS source here; we refuse instead.
    case Kind::kFunction:
      return jerr("cannot print a function");
    default:
      return jsString(v, depth);
  }
}

Result<std::string> jsString(const Value& v, int depth) {
  if (depth > kMaxValueDepth) return jerr("value nested too deeply");
  switch (v.kind) {
    case Kind::kUndefined:
      return std::string("undefined");
    case Kind::kNull:
      return std::string("null");
    case Kind::kBool:
      return std::string(v.b ? "true" : "false");
    case Kind::kInt:
      return std::to_string(v.i);
    case Kind::kFloat:
      return text::jsNumber(v.f);
    case Kind::kString:
      return *v.s;
    case Kind::kArray: {  // Array.prototype.toString: elements' RuntimeValue.toString(), joined by
                          // ","
      std::string out;
      for (size_t n = 0; n < v.arr->items.size(); ++n) {
        if (n) out += ',';
        KVJ_TRY(std::string e, toDisplay(v.arr->items[n], depth + 1));
        out += e;
        if (out.size() > kMaxOutputBytes) return jerr("string too long");
      }
      return out;
    }
    case Kind::kObject:
    case Kind::kNamespace:
      return std::string("[object Map]");
    case Kind::kFunction:
      return jerr("cannot convert a function to a string");
  }
  return std::string();
}

static void jsonString(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  appendJsonEscaped(out, s, ensure_ascii);
  out += '"';
}

Result<std::string> toJson(const Value& v, const JsonOptions& opt, int depth) {
  if (depth > kMaxValueDepth) return jerr("value nested too deeply for tojson");
  std::string item_sep, key_sep;
  bool indent = opt.indent && *opt.indent != 0;
  if (opt.separators) {
    item_sep = opt.separators->first;
    key_sep = opt.separators->second;
  } else {
    item_sep = indent ? "," : ", ";
    key_sep = ": ";
  }
  switch (v.kind) {
    case Kind::kNull:
      return std::string("null");
    case Kind::kUndefined:
      return std::string(opt.undefined_as_null ? "null" : "undefined");
    case Kind::kBool:
      return std::string(v.b ? "true" : "false");
    case Kind::kInt:
      return std::to_string(v.i);
    // JSON.stringify(2.0) is "2" (Python json.dumps gives "2.0"); NaN/Infinity become null.
    case Kind::kFloat:
      return std::isfinite(v.f) ? text::jsNumber(v.f) : std::string("null");
    case Kind::kString: {
      std::string out;
      jsonString(out, *v.s, opt.ensure_ascii);
      return out;
    }
    case Kind::kFunction:
      return jerr("Cannot convert to JSON: FunctionValue");
    default:
      break;
  }
  std::string pad_unit =
      indent && *opt.indent > 0
          ? std::string(static_cast<size_t>(std::min<int64_t>(*opt.indent, 64)), ' ')
          : "";
  std::string base = "\n";
  for (int d = 0; d < depth; ++d) base += pad_unit;
  std::string child = base + pad_unit;
  std::string out;
  if (v.kind == Kind::kArray) {
    if (v.arr->tuple) return jerr("Cannot convert to JSON: TupleValue");
    const auto& items = v.arr->items;
    out += '[';
    for (size_t n = 0; n < items.size(); ++n) {
      if (n) out += item_sep;
      if (indent) out += child;
      KVJ_TRY(std::string e, toJson(items[n], opt, depth + 1));
      out += e;
      if (out.size() > kMaxOutputBytes) return jerr("tojson output too large");
    }
    if (indent && !items.empty()) out += base;
    out += ']';
    return out;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& e : v.obj->entries) entries.push_back(&e);
  // @huggingface/jinja sorts with localeCompare; we sort by code point (Python's order).
  if (opt.sort_keys) {
    std::stable_sort(entries.begin(), entries.end(),
                     [](auto* a, auto* b) { return a->first < b->first; });
  }
  out += '{';
  for (size_t n = 0; n < entries.size(); ++n) {
    if (n) out += item_sep;
    if (indent) out += child;
    jsonString(out, entries[n]->first, opt.ensure_ascii);
    out += key_sep;
    KVJ_TRY(std::string e, toJson(entries[n]->second, opt, depth + 1));
    out += e;
    if (out.size() > kMaxOutputBytes) return jerr("tojson output too large");
  }
  if (indent && !entries.empty()) out += base;
  out += '}';
  return out;
}

static bool isPrimitive(const Value& v) {
  return v.kind == Kind::kBool || v.isNumber() || v.isString();
}

bool looseEquals(const Value& a, const Value& b) {
  bool an = a.isNull() || a.isUndefined(), bn = b.isNull() || b.isUndefined();
  if (an || bn) return an && bn;
  if (a.isNumber() && b.isNumber()) return a.num() == b.num();
  if (a.isString() && b.isString()) return *a.s == *b.s;
  if (a.kind == Kind::kBool && b.kind == Kind::kBool) return a.b == b.b;
  if (!isPrimitive(a) && !isPrimitive(b)) {  // identity
    if (a.kind != b.kind) return false;
    return a.kind == Kind::kArray      ? a.arr == b.arr
           : a.kind == Kind::kFunction ? a.fn == b.fn
                                       : a.obj == b.obj;
  }
  if (a.kind == Kind::kBool) return looseEquals(Value::integer(a.b), b);
  if (b.kind == Kind::kBool) return looseEquals(a, Value::integer(b.b));
  if (a.isNumber() && b.isString()) return a.num() == text::jsToNumber(*b.s);
  if (a.isString() && b.isNumber()) return text::jsToNumber(*a.s) == b.num();
  // container vs primitive: JS converts the container with String() first
  const Value& c = isPrimitive(a) ? b : a;
  const Value& p = isPrimitive(a) ? a : b;
  if (c.kind == Kind::kFunction) return false;
  auto s = jsString(c);
  if (!s) return false;
  return looseEquals(Value::str(*s), p);
}

bool strictEquals(const Value& a, const Value& b) {
  if (a.isNumber() && b.isNumber()) return a.num() == b.num();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined:
    case Kind::kNull:
      return true;
    case Kind::kBool:
      return a.b == b.b;
    case Kind::kString:
      return *a.s == *b.s;
    case Kind::kArray:
      return a.arr == b.arr;
    case Kind::kFunction:
      return a.fn == b.fn;
    default:
      return a.obj == b.obj;
  }
}

Result<int> compareValues(const Value& a, const Value& b, bool case_sensitive) {
  if (a.isNull() && b.isNull()) return 0;
  if (a.isNull() || b.isNull() || a.isUndefined() || b.isUndefined()) {
    if (a.isUndefined() && b.isUndefined()) return 0;
    return jerr(std::string("Cannot compare ") + kindName(a.kind) + " with " + kindName(b.kind));
  }
  auto numeric = [](const Value& v) { return v.isNumber() || v.kind == Kind::kBool; };
  if (numeric(a) && numeric(b)) {
    double x = a.num(), y = b.num();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.kind != b.kind) {
    return jerr(std::string("Cannot compare different types: ") + kindName(a.kind) + " and " +
                kindName(b.kind));
  }
  if (a.isString()) {
    std::string x = case_sensitive ? *a.s : text::asciiLower(*a.s);
    std::string y = case_sensitive ? *b.s : text::asciiLower(*b.s);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  return jerr(std::string("Cannot compare type: ") + kindName(a.kind));
}

}  // namespace kvgate::jinja
