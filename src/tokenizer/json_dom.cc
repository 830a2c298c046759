#include "tokenizer/json_dom.h"

#include <simdjson.h>

namespace kvgate::tok {
namespace {

using simdjson::ondemand::json_type;
using J = nlohmann::ordered_json;

constexpr size_t kKeepBytes = 256 * 1024;  // parser capacity kept between calls

simdjson::ondemand::parser& threadParser() {
  thread_local simdjson::ondemand::parser parser;
  return parser;
}

bool convert(simdjson::ondemand::value v, J& out, size_t depth, size_t max_depth);

// An object's members into `out` (made an object), their values at `depth`.
bool convertMembers(simdjson::ondemand::object o, J& out, size_t depth, size_t max_depth) {
  out = J::object();
  for (auto field : o) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return false;
    simdjson::ondemand::value fv;
    if (field.value().get(fv)) return false;
    // (operator[]: a repeated key keeps its place and takes the later value, as nlohmann's
    // parser does)
    if (!convert(fv, out[std::string(key)], depth, max_depth)) return false;
  }
  return true;
}

// Converts one value; false on any error (the caller falls back to nlohmann).
bool convert(simdjson::ondemand::value v, J& out, size_t depth, size_t max_depth) {
  json_type t;
  if (v.type().get(t)) return false;
  switch (t) {
    case json_type::object: {
      if (depth >= max_depth) return false;
      simdjson::ondemand::object o;
      if (v.get_object().get(o)) return false;
      return convertMembers(o, out, depth + 1, max_depth);
    }
    case json_type::array: {
      if (depth >= max_depth) return false;
      simdjson::ondemand::array a;
      if (v.get_array().get(a)) return false;
      out = J::array();
      for (auto elem : a) {
        simdjson::ondemand::value ev;
        if (elem.get(ev)) return false;
        J item;
        if (!convert(ev, item, depth + 1, max_depth)) return false;
        out.push_back(std::move(item));
      }
      return true;
    }
    case json_type::string: {
      std::string_view s;
      if (v.get_string().get(s)) return false;
      out = std::string(s);
      return true;
    }
    case json_type::number: {
      // nlohmann reads the token itself: its integer, unsigned and float types and values
      // ("-0", 1e400, 2^64) are exactly what its parser would make. A NUL right after the
      // digits is part of simdjson's token but ends nlohmann's input ("1\0x" would read as 1):
      // refused, as a parse of the whole body refuses it.
      std::string_view raw = v.raw_json_token();
      if (raw.find('\0') != std::string_view::npos) return false;
      out = J::parse(raw, nullptr, false);
      return !out.is_discarded();
    }
    case json_type::boolean: {
      bool b = false;
      if (v.get_bool().get(b)) return false;
      out = b;
      return true;
    }
    case json_type::null: {
      bool is_null = false;
      if (v.is_null().get(is_null) || !is_null) return false;
      out = nullptr;
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

size_t domFromJsonPadding() { return simdjson::SIMDJSON_PADDING; }

std::optional<J> domFromJson(const std::string& text, size_t max_depth) {
  if (text.capacity() < text.size() + simdjson::SIMDJSON_PADDING) return std::nullopt;
  simdjson::ondemand::parser& parser = threadParser();
  struct Shrink {  // the parser keeps ~6x the largest body it saw: not past this call
    simdjson::ondemand::parser& p;
    ~Shrink() {
      if (p.capacity() > kKeepBytes) (void)p.allocate(kKeepBytes, p.max_depth());
    }
  } shrink{parser};
  simdjson::ondemand::document doc;
  if (parser.iterate(text.data(), text.size(), text.capacity()).get(doc)) return std::nullopt;
  simdjson::ondemand::object root;  // (the request bodies converted here are objects)
  if (doc.get_object().get(root)) return std::nullopt;
  J out;
  if (!convertMembers(root, out, 1, max_depth)) return std::nullopt;
  const char* rest = nullptr;
  if (doc.current_location().get(rest) == simdjson::SUCCESS) return std::nullopt;  // bytes after
  return out;
}

}  // namespace kvgate::tok
