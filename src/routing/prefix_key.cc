#include "routing/prefix_key.h"

#include <simdjson.h>
#include <xxhash.h>

namespace kvgate::routing {
namespace {

using simdjson::ondemand::value;

// Appends up to the remaining budget of K bytes.
struct Renderer {
  std::string out;
  size_t limit;
  bool full() const { return out.size() >= limit; }
  void add(std::string_view s) {
    if (full()) return;
    out.append(s.substr(0, limit - out.size()));
  }
  void add(char c) {
    if (!full()) out.push_back(c);
  }
};

bool renderContent(value v, Renderer& r) {
  simdjson::ondemand::json_type t;
  if (v.type().get(t)) return false;
  if (t == simdjson::ondemand::json_type::string) {
    std::string_view s;
    if (v.get_string().get(s)) return false;
    r.add(s);
    return true;
  }
  if (t == simdjson::ondemand::json_type::array) {
    simdjson::ondemand::array parts;
    if (v.get_array().get(parts)) return false;
    for (auto part : parts) {
      simdjson::ondemand::object po;
      if (part.get_object().get(po)) continue;  // non-object parts carry no text
      for (auto f : po) {
        std::string_view k;
        if (f.unescaped_key().get(k)) return false;
        if (k != "text") continue;
        std::string_view s;
        if (f.value().get_string().get(s) == simdjson::SUCCESS) r.add(s);
      }
    }
    return true;
  }
  return true;  // null content (assistant tool calls): nothing to add
}

}  // namespace

BodyKeys computeBodyKeys(std::string_view body, size_t prefix_bytes) {
  BodyKeys keys;
  thread_local simdjson::ondemand::parser parser(64 * 1024 * 1024);
  simdjson::padded_string padded(body.data(), body.size());
  simdjson::ondemand::document doc;
  if (parser.iterate(padded).get(doc)) return keys;
  simdjson::ondemand::object obj;
  if (doc.get_object().get(obj)) return keys;
  std::string& model = keys.model;
  std::string salt;
  Renderer r{{}, prefix_bytes};
  bool have_prompt = false;
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return keys;
    value v;
    if (field.value().get(v)) return keys;
    std::string_view s;
    if (key == "model") {
      if (v.get_string().get(s) == simdjson::SUCCESS) model.assign(s);
    } else if (key == "cache_salt") {
      if (v.get_string().get(s) == simdjson::SUCCESS) salt.assign(s);
    } else if (key == "user") {
      if (v.get_string().get(s) == simdjson::SUCCESS) keys.user = std::string(s);
    } else if (key == "messages") {
      simdjson::ondemand::array msgs;
      if (v.get_array().get(msgs)) return keys;
      have_prompt = true;
      for (auto m : msgs) {
        simdjson::ondemand::object mo;
        if (m.get_object().get(mo)) return keys;
        std::string role;
        std::string text;
        Renderer content{{}, prefix_bytes};
        for (auto mf : mo) {
          std::string_view mk;
          if (mf.unescaped_key().get(mk)) return keys;
          value mv;
          if (mf.value().get(mv)) return keys;
          if (mk == "role") {
            std::string_view rs;
            if (mv.get_string().get(rs) == simdjson::SUCCESS) role.assign(rs);
          } else if (mk == "content") {
            if (!renderContent(mv, content)) return keys;
          }
        }
        r.add(role);
        r.add('\x1f');
        r.add(content.out);
        r.add('\x1e');
      }
    } else if (key == "prompt") {
      have_prompt = true;
      if (v.get_string().get(s) == simdjson::SUCCESS) {
        r.add(s);
      } else {  // token ids: rendered as decimal numbers joined by ','
        simdjson::ondemand::array ids;
        if (v.get_array().get(ids)) return keys;
        for (auto id : ids) {
          int64_t x = 0;
          if (id.get_int64().get(x)) break;  // batched or malformed prompts: key what we have
          r.add(std::to_string(x));
          r.add(',');
        }
      }
    }
  }
  keys.json_ok = true;
  if (!have_prompt || r.out.empty()) return keys;
  std::string material = model;
  material.push_back('\0');
  material += salt;
  material.push_back('\0');
  material += r.out;
  keys.prefix_key = XXH3_64bits(material.data(), material.size());
  return keys;
}

}  // namespace kvgate::routing
