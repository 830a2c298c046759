// Runtime values of the Jinja interpreter: a small tagged value, arena-owned containers (so that
// cycles such as `ns.self = ns` cannot leak past one render), limits, and the error helpers.
// Semantics follow @huggingface/jinja 0.5.11 (JS-backed): integers and floats are distinct kinds,
// strings are UTF-8 (lengths counted in UTF-16 units like JS), containers compare by identity.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/result.h"

namespace kvgate::jinja {

// Limits (hostile templates and inputs end in an error, never a crash or an unbounded loop).
inline constexpr size_t kMaxOutputBytes = 16u << 20;  // rendered text and any single string
inline constexpr int kMaxCallDepth = 64;              // nested macro calls
inline constexpr int kMaxEvalDepth = 512;             // nested evaluation (statements+expressions)
inline constexpr int kMaxParseDepth = 128;            // nesting of blocks / parenthesised exprs
inline constexpr int kMaxValueDepth = 256;  // nesting of lists/dicts when printed/converted
inline constexpr size_t kMaxTemplateBytes = 1u << 20;  // template source
inline constexpr size_t kMaxRangeItems = 1u << 20;     // range() result
inline constexpr size_t kMaxHeapItems = 4u << 20;  // list items + dict entries created per render
inline constexpr uint64_t kMaxSteps = 50'000'000;  // evaluation steps per render

enum class Kind : uint8_t {
  kUndefined,
  kNull,
  kBool,
  kInt,
  kFloat,
  kString,
  kArray,
  kObject,
  kNamespace,
  kFunction
};

struct Array;
struct Object;
struct Callable;

struct Value {
  Value() = default;
  explicit Value(Kind k) : kind(k) {}
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::shared_ptr<const std::string> s;  // kString
  Array* arr = nullptr;                  // kArray (arena-owned)
  Object* obj = nullptr;                 // kObject, kNamespace (arena-owned)
  const Callable* fn = nullptr;          // kFunction (arena-owned)

  static Value null() { return Value{Kind::kNull}; }
  static Value boolean(bool v) {
    Value x{Kind::kBool};
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x{Kind::kInt};
    x.i = v;
    return x;
  }
  static Value real(double v) {
    Value x{Kind::kFloat};
    x.f = v;
    return x;
  }
  static Value str(std::string v) {
    Value x{Kind::kString};
    x.s = std::make_shared<const std::string>(std::move(v));
    return x;
  }
  bool isUndefined() const { return kind == Kind::kUndefined; }
  bool isNull() const { return kind == Kind::kNull; }
  bool isString() const { return kind == Kind::kString; }
  bool isNumber() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool isArray() const { return kind == Kind::kArray; }
  bool isObject() const { return kind == Kind::kObject; }
  bool isContainer() const { return kind == Kind::kObject || kind == Kind::kNamespace; }
  const std::string& sv() const { return *s; }
  double num() const {
    return kind == Kind::kInt ? static_cast<double>(i) : kind == Kind::kFloat ? f : b ? 1 : 0;
  }
};

struct Array {
  std::vector<Value> items;
  bool tuple = false;  // @huggingface/jinja's TupleValue: cannot be printed or passed to tojson
};

// Insertion-ordered string-keyed map; a hash index is added once it grows past a few entries.
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  std::unordered_map<std::string, size_t> index;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

enum class Builtin : uint8_t {
  kNamespace,
  kRange,
  kRaiseException,
  kStrftimeNow,
  kDict,    // globals
  kMethod,  // `self.name(...)`
  kMacro,
};

struct MacroDef;  // parser.h

struct Callable {
  Builtin kind;
  std::string name;  // method name for kMethod
  Value self;        // receiver for kMethod
  const MacroDef* macro = nullptr;
};

// Per-render allocation arena for containers; deque keeps addresses stable.
class Heap {
 public:
  Array* newArray(size_t reserve = 0);
  Object* newObject();
  const Callable* newCallable(Callable c);
  // Counts list items / dict entries created; false when the per-render budget is exhausted.
  bool charge(size_t items) {
    used_ += items;
    return used_ <= kMaxHeapItems;
  }

 private:
  std::deque<Array> arrays_;
  std::deque<Object> objects_;
  std::deque<Callable> callables_;
  size_t used_ = 0;
};

inline tl::unexpected<Error> jerr(std::string what) {
  return fail(400, "chat_template", std::move(what));
}

// Early-return helpers for Result-returning code (the interpreter does not use exceptions).
#define KVJ_CAT2(a, b) a##b
#define KVJ_CAT(a, b) KVJ_CAT2(a, b)
#define KVJ_TRY(decl, expr)                                              \
  auto KVJ_CAT(kvj_r_, __LINE__) = (expr);                               \
  if (!KVJ_CAT(kvj_r_, __LINE__))                                        \
    return tl::unexpected(std::move(KVJ_CAT(kvj_r_, __LINE__).error())); \
  decl = std::move(*KVJ_CAT(kvj_r_, __LINE__))
#define KVJ_CHECK(expr)                                            \
  do {                                                             \
    auto kvj_c_ = (expr);                                          \
    if (!kvj_c_) return tl::unexpected(std::move(kvj_c_.error())); \
  } while (0)

const char* kindName(Kind k);  // @huggingface/jinja's type names, for messages

// Python truthiness as @huggingface/jinja computes it.
bool truthy(const Value& v);

}  // namespace kvgate::jinja
