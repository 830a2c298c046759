#include "tokenizer/json_dom.h"

#include <unordered_map>

namespace kvgate::tok {
namespace {

using simdjson::ondemand::json_type;
using J = nlohmann::ordered_json;

constexpr size_t kKeepBytes = 256 * 1024;  // parser capacity kept between calls

simdjson::ondemand::parser& threadParser() {
  thread_local simdjson::ondemand::parser parser;
  return parser;
}

// The simdjson errors a document can hold and still be JSON (as Python's json reads it).
DomResult resultOf(simdjson::error_code e) {
  return e == simdjson::STRING_ERROR || e == simdjson::NUMBER_OUT_OF_RANGE ? DomResult::kRefused
                                                                           : DomResult::kError;
}

class Converter {
 public:
  Converter(const DomLimits& lim, size_t& used) : lim_(lim), used_(used) {}

  DomResult value(simdjson::ondemand::value v, J& out, size_t depth) {
    json_type t;
    if (auto e = v.type().get(t)) return resultOf(e);
    switch (t) {
      case json_type::object: {
        simdjson::ondemand::object o;
        if (auto e = v.get_object().get(o)) return resultOf(e);
        return members(o, out, depth + 1);
      }
      case json_type::array: {
        if (depth >= lim_.max_depth) return DomResult::kRefused;
        simdjson::ondemand::array a;
        if (auto e = v.get_array().get(a)) return resultOf(e);
        out = J::array();
        for (auto elem : a) {
          simdjson::ondemand::value ev;
          if (auto e = elem.get(ev)) return resultOf(e);
          J item;
          if (DomResult r = value(ev, item, depth + 1); r != DomResult::kOk) return r;
          out.push_back(std::move(item));
          if (!count(1)) return DomResult::kRefused;
        }
        return count(2) ? DomResult::kOk : DomResult::kRefused;
      }
      case json_type::string: {
        std::string_view s;
        if (auto e = v.get_string().get(s)) return resultOf(e);
        if (!count(s.size() + 2)) return DomResult::kRefused;
        out = std::string(s);
        return DomResult::kOk;
      }
      case json_type::number: {
        // nlohmann reads the token itself: its integer, unsigned and float types and values
        // ("-0", 1e400, 2^64) are exactly what its parser would make. A NUL right after the
        // digits is part of simdjson's token but ends nlohmann's input ("1\0x" would read as 1):
        // refused, as a parse of the whole body refuses it.
        std::string_view raw = v.raw_json_token();
        while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' ||
                                raw.back() == '\t'))
          raw.remove_suffix(1);
        if (!count(raw.size())) return DomResult::kRefused;
        if (raw.find('\0') != std::string_view::npos) return DomResult::kRefused;
        // (what nlohmann cannot read, 1e400 or a 400-digit integer, Python's json can)
        out = J::parse(raw, nullptr, false);
        if (out.is_discarded()) return DomResult::kRefused;
        if (lim_.refuse_big_integers && out.is_number_float() &&
            raw.find_first_of(".eE") == std::string_view::npos)
          return DomResult::kRefused;
        return DomResult::kOk;
      }
      case json_type::boolean: {
        bool b = false;
        if (auto e = v.get_bool().get(b)) return resultOf(e);
        if (!count(5)) return DomResult::kRefused;
        out = b;
        return DomResult::kOk;
      }
      case json_type::null: {
        bool is_null = false;
        if (auto e = v.is_null().get(is_null)) return resultOf(e);
        if (!is_null) return DomResult::kError;
        if (!count(4)) return DomResult::kRefused;
        out = nullptr;
        return DomResult::kOk;
      }
      default:
        return DomResult::kError;
    }
  }

  // An object's members into `out` (made an object), their values at `depth`. A repeated key
  // keeps its first place and takes the later value (nlohmann's operator[]), found through a
  // hash index once the object has more than a few members: nlohmann's own lookup is a linear
  // scan, quadratic over an object of thousands of distinct keys (a hostile body's, read before
  // its credentials are checked).
  DomResult members(simdjson::ondemand::object o, J& out, size_t depth) {
    if (depth > lim_.max_depth) return DomResult::kRefused;
    out = J::object();
    J::object_t& obj = out.get_ref<J::object_t&>();
    std::unordered_map<std::string, size_t> index;  // key -> place (past kLinear members)
    constexpr size_t kLinear = 8;
    for (auto field : o) {
      std::string_view key;
      if (auto e = field.unescaped_key().get(key)) return resultOf(e);
      simdjson::ondemand::value fv;
      if (auto e = field.value().get(fv)) return resultOf(e);
      if (!count(key.size() + 4)) return DomResult::kRefused;
      size_t at = obj.size();
      if (obj.size() <= kLinear) {
        for (size_t i = 0; i < obj.size(); ++i)
          if ((obj.begin() + i)->first == key) at = i;
      } else {
        if (index.empty())
          for (size_t i = 0; i < obj.size(); ++i) index.emplace((obj.begin() + i)->first, i);
        if (auto it = index.find(std::string(key)); it != index.end()) at = it->second;
      }
      if (at == obj.size()) {
        obj.emplace_back(std::string(key), J());
        if (!index.empty()) index.emplace(std::string(key), at);
      }
      if (DomResult r = value(fv, (obj.begin() + at)->second, depth); r != DomResult::kOk) return r;
    }
    return count(2) ? DomResult::kOk : DomResult::kRefused;
  }

 private:
  bool count(size_t n) {
    used_ += n;
    return used_ <= lim_.max_bytes;
  }
  const DomLimits& lim_;
  size_t& used_;
};

}  // namespace

DomResult domFromValue(simdjson::ondemand::value v, J& out, const DomLimits& lim, size_t& used) {
  return Converter(lim, used).value(v, out, 0);
}

size_t domFromJsonPadding() { return simdjson::SIMDJSON_PADDING; }

std::optional<J> domFromJson(const std::string& text, size_t max_depth) {
  if (text.capacity() < text.size() + simdjson::SIMDJSON_PADDING) return std::nullopt;
  simdjson::ondemand::parser& parser = threadParser();
  struct Shrink {  // the parser keeps ~6x the largest body it saw: not past this call
    simdjson::ondemand::parser& p;
    ~Shrink() {
      if (p.capacity() > kKeepBytes) {
        auto e = p.allocate(kKeepBytes, p.max_depth());
        (void)e;  // on failure the next call allocates again
      }
    }
  } shrink{parser};
  simdjson::ondemand::document doc;
  if (parser.iterate(text.data(), text.size(), text.capacity()).get(doc)) return std::nullopt;
  simdjson::ondemand::object root;  // (the request bodies converted here are objects)
  if (doc.get_object().get(root)) return std::nullopt;
  J out;
  DomLimits lim;
  lim.max_depth = max_depth;
  size_t used = 0;
  if (Converter(lim, used).members(root, out, 1) != DomResult::kOk) return std::nullopt;
  const char* rest = nullptr;
  if (doc.current_location().get(rest) == simdjson::SUCCESS) return std::nullopt;  // bytes after
  return out;
}

}  // namespace kvgate::tok
