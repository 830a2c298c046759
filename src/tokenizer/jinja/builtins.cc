// Tests (`x is ...`), methods on strings/dicts/lists, and the globals (namespace, range,
// raise_exception, strftime_now, dict), with @huggingface/jinja 0.5.11 behaviour. Where it differs
// from Python Jinja2 the difference is noted; names it lacks are extensions with Python behaviour.
#include <algorithm>
#include <ctime>
#include <optional>

#include "tokenizer/jinja/convert.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/text.h"

namespace kvgate::jinja {
namespace {

tl::unexpected<Error> argError(const std::string& what) { return jerr(what); }

Result<bool> containsValue(const Value& hay, const Value& needle) {
  if (hay.isArray()) {
    for (const auto& x : hay.arr->items)
      if (strictEquals(x, needle)) return true;
    return false;
  }
  if (hay.isString() && needle.isString()) return hay.sv().find(needle.sv()) != std::string::npos;
  if (hay.isObject() && needle.isString()) return hay.obj->find(needle.sv()) != nullptr;
  return argError(std::string("cannot test membership in ") + kindName(hay.kind));
}

}  // namespace

Result<bool> applyTest(Interp& in, const std::string& name, const Value& v, const Args& args) {
  const Value* arg = args.get(0, "value");
  if (name == "defined") return !v.isUndefined();
  if (name == "undefined") return v.isUndefined();
  if (name == "none") return v.isNull();
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "string") return v.isString();
  if (name == "number") return v.isNumber();
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;  // extension
  if (name == "callable") return v.kind == Kind::kFunction;
  if (name == "mapping") return v.isObject();
  if (name == "iterable") return v.isArray() || v.isString();  // HF: dicts are not "iterable"
  if (name == "sequence") return v.isArray() || v.isObject() || v.isString();
  if (name == "lower") return v.isString() && text::asciiLower(v.sv()) == v.sv();
  if (name == "upper") return v.isString() && text::asciiUpper(v.sv()) == v.sv();
  if (name == "odd" || name == "even") {
    if (v.kind != Kind::kInt) return argError("cannot " + name + " on " + kindName(v.kind));
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "eq" || name == "equalto" || name == "==" || name == "sameas") {
    if (!arg) return argError("test '" + name + "' needs an argument");
    return strictEquals(v, *arg);
  }
  // Extensions (Python Jinja2 tests that @huggingface/jinja lacks).
  if (name == "ne" || name == "!=") {
    if (!arg) return argError("test 'ne' needs an argument");
    return !strictEquals(v, *arg);
  }
  if (name == "divisibleby") {
    if (!arg || v.kind != Kind::kInt || arg->kind != Kind::kInt)
      return argError("divisibleby needs integers");
    if (arg->i == 0) return argError("integer division or modulo by zero");
    return arg->i == -1 || v.i % arg->i == 0;
  }
  if (name == "lt" || name == "gt" || name == "le" || name == "ge" || name == "<" || name == ">" ||
      name == "<=" || name == ">=") {
    if (!arg) return argError("test '" + name + "' needs an argument");
    KVJ_TRY(int c, compareValues(v, *arg, true));
    if (name == "lt" || name == "<") return c < 0;
    if (name == "gt" || name == ">") return c > 0;
    if (name == "le" || name == "<=") return c <= 0;
    return c >= 0;
  }
  if (name == "in") {
    if (!arg) return argError("test 'in' needs an argument");
    return containsValue(*arg, v);
  }
  (void)in;
  return argError("Unknown test: " + name);
}

bool isMethodName(const Value& self, const std::string& n) {
  if (self.isString()) {
    return n == "upper" || n == "lower" || n == "strip" || n == "title" || n == "capitalize" ||
           n == "rstrip" || n == "lstrip" || n == "startswith" || n == "endswith" || n == "split" ||
           n == "replace" || n == "find" || n == "count" || n == "join";
  }
  if (self.isObject())
    return n == "get" || n == "items" || n == "keys" || n == "values" || n == "dictsort";
  if (self.isArray()) return n == "append";
  return false;
}

static Result<Value> stringReplace(Interp& in, const std::string& s, const Args& args) {
  const Value* old_v = args.get(0, "old");
  const Value* new_v = args.get(1, "new");
  if (!old_v || !new_v) return argError("replace() requires at least two arguments");
  if (!old_v->isString() || !new_v->isString())
    return argError("replace() arguments must be strings");
  const Value* count_v = args.get(2, "count");
  if (count_v && count_v->kind != Kind::kInt && !count_v->isNull()) {
    return argError("replace() count argument must be a number or null");
  }
  int64_t remaining = count_v && count_v->kind == Kind::kInt && count_v->i >= 0 ? count_v->i : -1;
  const std::string& from = old_v->sv();
  const std::string& to = new_v->sv();
  std::string out;
  if (from.empty()) {  // matches before every code point and at the end
    auto cps = text::codePoints(s);
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (remaining != 0) {
        out += to;
        if (remaining > 0) --remaining;
      }
      if (k < cps.size()) out.append(cps[k]);
      if (out.size() > kMaxOutputBytes) return argError("string exceeds the output size limit");
    }
    return in.newString(std::move(out));
  }
  size_t pos = 0;
  while (remaining != 0) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    if (remaining > 0) --remaining;
    if (out.size() > kMaxOutputBytes) return argError("string exceeds the output size limit");
  }
  out.append(s, pos, std::string::npos);
  return in.newString(std::move(out));
}

static Result<Value> stringSplit(Interp& in, const std::string& s, const Args& args) {
  Value sep = args.get(0, "sep") ? *args.get(0, "sep") : Value::null();
  if (!sep.isString() && !sep.isNull()) return argError("sep argument must be a string or null");
  Value maxsplit = args.get(1, "maxsplit") ? *args.get(1, "maxsplit") : Value::integer(-1);
  if (maxsplit.kind != Kind::kInt) return argError("maxsplit argument must be a number");
  const int64_t max = maxsplit.i;
  std::vector<std::string> parts;
  if (sep.isNull()) {
    std::string_view t = text::trimStart(s);
    size_t pos = 0;
    while (pos < t.size()) {
      while (size_t n = text::spaceLenAt(t, pos)) pos += n;
      if (pos >= t.size()) break;
      size_t start = pos;
      while (pos < t.size() && text::spaceLenAt(t, pos) == 0) ++pos;
      if (max != -1 && static_cast<int64_t>(parts.size()) >= max) {
        parts.emplace_back(t.substr(start));
        break;
      }
      parts.emplace_back(t.substr(start, pos - start));
    }
  } else {
    const std::string& d = sep.sv();
    if (d.empty()) return argError("empty separator");
    size_t pos = 0;
    while (true) {
      size_t hit = s.find(d, pos);
      if (hit == std::string::npos) {
        parts.emplace_back(s.substr(pos));
        break;
      }
      parts.emplace_back(s.substr(pos, hit - pos));
      pos = hit + d.size();
    }
    auto len = static_cast<int64_t>(parts.size());
    if (max != -1 && len > max) {  // result.push(result.splice(maxsplit).join(sep))
      int64_t k = max < 0 ? std::max<int64_t>(len + max, 0) : max;
      std::string rest;
      for (int64_t j = k; j < len; ++j) {
        if (j > k) rest += d;
        rest += parts[static_cast<size_t>(j)];
      }
      parts.resize(static_cast<size_t>(k));
      parts.push_back(std::move(rest));
    }
  }
  std::vector<Value> items;
  for (auto& p : parts) items.push_back(Value::str(std::move(p)));
  return in.newArray(std::move(items));
}

static Result<Value> prefixTest(const std::string& s, const Args& args, bool starts) {
  const char* fname = starts ? "startswith" : "endswith";
  const Value* p = args.get(0, "prefix");
  if (!p) return argError(std::string(fname) + "() requires at least one argument");
  auto test = [&](const std::string& x) {
    return starts ? s.compare(0, x.size(), x) == 0 && s.size() >= x.size()
                  : s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (p->isString()) return Value::boolean(test(p->sv()));
  if (p->isArray()) {
    for (const auto& x : p->arr->items) {
      if (!x.isString()) return argError(std::string(fname) + "() tuple elements must be strings");
      if (test(x.sv())) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  return argError(std::string(fname) + "() argument must be a string or tuple of strings");
}

static Result<Value> dictItems(Interp& in, const Value& self) {
  std::vector<Value> items;
  for (const auto& [k, v] : self.obj->entries) {
    KVJ_TRY(Value pair, in.newArray({Value::str(k), v}));
    items.push_back(pair);
  }
  return in.newArray(std::move(items));
}

static Result<Value> dictSort(Interp& in, const Value& self, const Args& args) {
  const Value* cs = args.get(0, "case_sensitive");
  if (cs && cs->kind != Kind::kBool) return argError("case_sensitive must be a boolean");
  const Value* by = args.get(1, "by");
  if (by && !by->isString()) return argError("by must be a string");
  if (by && by->sv() != "key" && by->sv() != "value")
    return argError("by must be either 'key' or 'value'");
  const Value* rev = args.get(2, "reverse");
  if (rev && rev->kind != Kind::kBool) return argError("reverse must be a boolean");
  size_t idx = by && by->sv() == "value" ? 1 : 0;
  KVJ_TRY(Value items, dictItems(in, self));
  std::optional<Error> failure;
  std::stable_sort(items.arr->items.begin(), items.arr->items.end(),
                   [&](const Value& a, const Value& b) {
                     if (failure) return false;
                     auto c = compareValues(a.arr->items[idx], b.arr->items[idx], cs && cs->b);
                     if (!c) {
                       failure = c.error();
                       return false;
                     }
                     return rev && rev->b ? *c > 0 : *c < 0;
                   });
  if (failure) return tl::unexpected(*failure);
  return items;
}

Result<Value> callMethod(Interp& in, const Value& self, const std::string& n, const Args& args) {
  KVJ_CHECK(in.step());
  if (self.isString()) {
    const std::string& s = self.sv();
    // Python semantics (what transformers/vLLM run): strip/lstrip/rstrip honour `chars`, and
    // without it strip Python whitespace. @huggingface/jinja 0.5.11 ignores `chars` and uses JS
    // whitespace; Qwen3's `.lstrip('\n')` is where that shows.
    if (n == "strip" || n == "lstrip" || n == "rstrip") {
      const Value* chars = args.get(0, "chars");
      if (chars && !chars->isNull() && !chars->isUndefined() && !chars->isString())
        return jerr("strip arg must be None or str");
      std::string cs = chars && chars->isString() ? std::string(chars->sv()) : std::string();
      const std::string* cp = chars && chars->isString() ? &cs : nullptr;
      return in.newString(text::pyStrip(s, cp, n != "rstrip", n != "lstrip"));
    }
    if (n == "upper") return in.newString(text::asciiUpper(s));
    if (n == "lower") return in.newString(text::asciiLower(s));
    if (n == "title") return in.newString(text::titleCase(s));
    if (n == "capitalize") return in.newString(text::capitalize(s));
    if (n == "startswith") return prefixTest(s, args, true);
    if (n == "endswith") return prefixTest(s, args, false);
    if (n == "split") return stringSplit(in, s, args);
    if (n == "replace") return stringReplace(in, s, args);
    const Value* a = args.get(0, "sub");
    if (n == "find" || n == "count") {  // extensions
      if (!a || !a->isString()) return argError(n + "() needs a string argument");
      if (n == "find") {
        size_t hit = s.find(a->sv());
        if (hit == std::string::npos) return Value::integer(-1);
        return Value::integer(static_cast<int64_t>(text::codePoints(s.substr(0, hit)).size()));
      }
      if (a->sv().empty())
        return Value::integer(static_cast<int64_t>(text::codePoints(s).size() + 1));
      int64_t count = 0;
      for (size_t pos = s.find(a->sv()); pos != std::string::npos;
           pos = s.find(a->sv(), pos + a->sv().size()))
        ++count;
      return Value::integer(count);
    }
    if (n == "join") {  // extension: str.join(iterable of strings)
      if (!a || !a->isArray()) return argError("join() needs a list argument");
      std::string out;
      for (size_t k = 0; k < a->arr->items.size(); ++k) {
        if (!a->arr->items[k].isString()) return argError("join() items must be strings");
        if (k) out += s;
        out += a->arr->items[k].sv();
        if (out.size() > kMaxOutputBytes) return argError("string exceeds the output size limit");
      }
      return in.newString(std::move(out));
    }
  } else if (self.isObject()) {
    if (n == "get") {
      const Value* key = args.get(0, "key");
      if (!key || !key->isString()) {
        return argError(std::string("Object key must be a string: got ") +
                        kindName(key ? key->kind : Kind::kUndefined));
      }
      if (const Value* v = self.obj->find(key->sv())) return *v;
      const Value* dflt = args.get(1, "default");
      return dflt ? *dflt : Value::null();
    }
    if (n == "items") return dictItems(in, self);
    if (n == "keys" || n == "values") {
      std::vector<Value> items;
      for (const auto& [k, v] : self.obj->entries) items.push_back(n == "keys" ? Value::str(k) : v);
      return in.newArray(std::move(items));
    }
    if (n == "dictsort") return dictSort(in, self, args);
  } else if (self.isArray() && n == "append") {  // extension (HF has no list methods)
    if (args.pos.size() != 1) return argError("append() takes exactly one argument");
    if (!in.heap().charge(1)) return argError("template memory budget exceeded");
    self.arr->items.push_back(args.pos[0]);
    return Value::null();
  }
  return argError(std::string("Unknown method '") + n + "' on " + kindName(self.kind));
}

std::string strftimeJs(std::time_t t, std::string_view fmt) {
  static const char* kShort[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  static const char* kLong[] = {"January",   "February", "March",    "April",
                                "May",       "June",     "July",     "August",
                                "September", "October",  "November", "December"};
  std::tm tm{};
  localtime_r(&t, &tm);
  auto pad2 = [](int v) { return (v < 10 ? "0" : "") + std::to_string(v); };
  // HF supports only %Y %m %d %b %B %H %M %%; any other directive is copied unchanged
  // (Python's strftime would expand e.g. %A or %y).
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] == '%' && k + 1 < fmt.size()) {
      char c = fmt[k + 1];
      std::string rep;
      switch (c) {
        case 'Y':
          rep = std::to_string(tm.tm_year + 1900);
          break;
        case 'm':
          rep = pad2(tm.tm_mon + 1);
          break;
        case 'd':
          rep = pad2(tm.tm_mday);
          break;
        case 'b':
          rep = kShort[tm.tm_mon];
          break;
        case 'B':
          rep = kLong[tm.tm_mon];
          break;
        case 'H':
          rep = pad2(tm.tm_hour);
          break;
        case 'M':
          rep = pad2(tm.tm_min);
          break;
        case '%':
          rep = "%";
          break;
        default:
          break;
      }
      if (!rep.empty()) {
        out += rep;
        ++k;
        continue;
      }
    }
    out += fmt[k];
  }
  return out;
}

Result<Value> callGlobal(Interp& in, Builtin kind, const Args& args) {
  switch (kind) {
    case Builtin::kRaiseException: {
      std::string msg;
      for (size_t k = 0; k < args.pos.size(); ++k) {
        if (k) msg += ',';
        if (!args.pos[k].isNull() && !args.pos[k].isUndefined()) {
          KVJ_TRY(std::string part, jsString(args.pos[k]));
          msg += part;
        }
      }
      return jerr(msg);
    }
    case Builtin::kStrftimeNow: {
      const Value* f = args.get(0, "format");
      if (!f || !f->isString()) return argError("strftime_now() needs a format string");
      return in.newString(strftimeJs(in.now(), f->sv()));
    }
    case Builtin::kRange: {
      if (!args.kw.empty() || args.pos.empty() || args.pos.size() > 3)
        return argError("range() takes 1 to 3 integers");
      for (const auto& v : args.pos)
        if (v.kind != Kind::kInt) return argError("range() arguments must be integers");
      int64_t start = 0, stop = 0, stepv = 1;
      if (args.pos.size() == 1)
        stop = args.pos[0].i;
      else {
        start = args.pos[0].i;
        stop = args.pos[1].i;
      }
      if (args.pos.size() == 3) stepv = args.pos[2].i;
      if (stepv == 0) return argError("range() step must not be zero");
      std::vector<Value> items;
      for (__int128 i = start; stepv > 0 ? i < stop : i > stop; i += stepv) {
        if (items.size() >= kMaxRangeItems) return argError("range() result too large");
        items.push_back(Value::integer(static_cast<int64_t>(i)));
      }
      return in.newArray(std::move(items));
    }
    case Builtin::kNamespace:
    case Builtin::kDict: {
      bool ns = kind == Builtin::kNamespace;
      if (args.pos.size() > 1) return argError("namespace expected at most 1 argument");
      Value v{ns ? Kind::kNamespace : Kind::kObject};
      v.obj = in.heap().newObject();
      if (!args.pos.empty()) {
        const Value& src = args.pos[0];
        if (src.isObject()) {
          for (const auto& [k, x] : src.obj->entries) v.obj->set(k, x);
        } else if (src.isArray()) {
          for (const auto& pair : src.arr->items) {
            std::vector<Value> kv;
            if (pair.isArray())
              kv = pair.arr->items;
            else if (pair.isString())
              for (auto cp : text::codePoints(pair.sv())) kv.push_back(Value::str(std::string(cp)));
            if (kv.size() != 2)
              return argError("namespace expected an object or an iterable of [key, value] pairs");
            if (!kv[0].isString()) return argError("namespace keys must be strings");
            v.obj->set(kv[0].sv(), kv[1]);
          }
        } else {
          return argError(std::string("'") + kindName(src.kind) + "' object is not iterable");
        }
      }
      for (const auto& [k, x] : args.kw) v.obj->set(k, x);
      if (!in.heap().charge(v.obj->entries.size() + 1))
        return argError("template memory budget exceeded");
      return v;
    }
    default:
      return argError("not a function");
  }
}

}  // namespace kvgate::jinja
