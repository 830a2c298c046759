#include "proxy/request_info.h"

#include <simdjson.h>

namespace kvgate::proxy {

BodyParse extractModel(std::string_view body, std::string& model) {
  // simdjson needs SIMDJSON_PADDING readable bytes past the end: copy into a padded string.
  thread_local simdjson::ondemand::parser parser(64 * 1024 * 1024);
  simdjson::padded_string padded(body.data(), body.size());
  simdjson::ondemand::document doc;
  if (parser.iterate(padded).get(doc)) return BodyParse::kNotJson;
  simdjson::ondemand::object obj;
  if (doc.get_object().get(obj)) return BodyParse::kNotJson;
  // Walk every top-level key so a truncated or malformed object is detected.
  bool found = false;
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return BodyParse::kNotJson;
    if (key == "model") {  // a repeated key: the last wins, as in Python's json (the engine's view)
      std::string_view v;
      if (field.value().get_string().get(v)) return BodyParse::kNoModel;
      model.assign(v);
      found = true;
    }  // other values are skipped by the iterator (structurally checked, not fully validated)
  }
  return found ? BodyParse::kOk : BodyParse::kNoModel;
}

}  // namespace kvgate::proxy
