#include "engines/pd_dialect.h"

#include <simdjson.h>

#include <initializer_list>
#include <vector>

#include "common/json_escape.h"

namespace kvgate::engines::pd {
namespace od = simdjson::ondemand;

std::optional<Dialect> dialectFromName(std::string_view name) {
  if (name == "vllm") return Dialect::kVllm;
  if (name == "sglang") return Dialect::kSglang;
  if (name == "trtllm") return Dialect::kTrtllm;
  return std::nullopt;
}

const char* dialectName(Dialect d) {
  switch (d) {
    case Dialect::kVllm:
      return "vllm";
    case Dialect::kSglang:
      return "sglang";
    case Dialect::kTrtllm:
      return "trtllm";
  }
  return "";
}

namespace {

auto notObject(std::string_view what) {
  return fail(400, "body", std::string(what) + " is not a JSON object");
}

// Calls f(unescaped key, raw value) for each top-level member of the JSON object `text`; false
// when `text` is not one JSON object (trailing bytes included). The views die on return.
// True when `padded` is one whole, valid JSON text (on-demand iteration alone checks only what
// it reads: an opaque value copied raw must be valid too).
bool validJson(const simdjson::padded_string& padded) {
  thread_local simdjson::dom::parser validator;
  simdjson::dom::element root;
  const bool ok = !validator.parse(padded).get(root);
  if (validator.capacity() > (size_t{4} << 20)) validator = simdjson::dom::parser();  // (memory)
  return ok;
}

template <class F>
bool forEachMember(std::string_view text, F&& f) {
  simdjson::padded_string padded(text);
  if (!validJson(padded)) return false;
  od::parser parser;
  od::document doc;
  if (parser.iterate(padded).get(doc)) return false;
  od::object obj;
  if (doc.get_object().get(obj)) return false;
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return false;
    od::value v;
    if (field.value().get(v)) return false;
    std::string_view raw;
    if (simdjson::to_json_string(v).get(raw)) return false;
    if (!f(key, raw)) return false;
  }
  // Nothing may follow the object: past the end, the document has no current location.
  return doc.current_location().error() == simdjson::OUT_OF_BOUNDS;
}

// `body` with the members named in `drop` removed and `append` ("k":v,... already encoded)
// added last. `present` gets bit i set when drop[i] was in the body.
Result<std::string> rewrite(std::string_view body, std::initializer_list<std::string_view> drop,
                            std::string_view append, uint32_t* present = nullptr,
                            std::string_view what = "the request body") {
  std::string out;
  out.reserve(body.size() + append.size() + 2);
  out += '{';
  uint32_t seen = 0;
  bool ok = forEachMember(body, [&](std::string_view key, std::string_view raw) {
    uint32_t bit = 1;
    for (std::string_view d : drop) {
      if (key == d) {
        seen |= bit;
        return true;
      }
      bit <<= 1;
    }
    if (out.size() > 1) out += ',';
    out += '"';
    appendJsonEscaped(out, key);
    out += "\":";
    out += raw;
    return true;
  });
  if (!ok) return notObject(what);
  if (!append.empty()) {
    if (out.size() > 1) out += ',';
    out += append;
  }
  out += '}';
  if (present) *present = seen;
  return out;
}

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  appendJsonEscaped(out, s);
  out += '"';
  return out;
}

}  // namespace

Result<std::string> vllmPrefillBody(std::string_view client_body) {
  // Bits: 0 stream, 1 max_tokens, 2 max_completion_tokens, 3 stream_options, 4 min_tokens,
  // 5 min_completion_tokens, 6 kv_transfer_params.
  uint32_t present = 0;
  auto r = rewrite(client_body,
                   {"stream", "max_tokens", "max_completion_tokens", "stream_options", "min_tokens",
                    "min_completion_tokens", "kv_transfer_params"},
                   {}, &present);
  if (!r) return r;
  std::string append = "\"stream\":false,\"max_tokens\":1,";
  if (present & 4) append += "\"max_completion_tokens\":1,";
  append +=
      "\"kv_transfer_params\":{\"do_remote_decode\":true,\"do_remote_prefill\":false,"
      "\"remote_engine_id\":null,\"remote_block_ids\":null,\"remote_host\":null,"
      "\"remote_port\":null}";
  std::string& body = *r;
  body.pop_back();  // '}'
  if (body.size() > 1) body += ',';
  body += append;
  body += '}';
  return r;
}

Result<std::optional<std::string>> vllmTransferParams(std::string_view prefill_answer) {
  std::optional<std::string> params;
  bool bad_type = false;
  bool ok = forEachMember(prefill_answer, [&](std::string_view key, std::string_view raw) {
    if (key != "kv_transfer_params") return true;
    if (raw == "null") {
      params.reset();
    } else if (!raw.empty() && raw.front() == '{') {
      params.emplace(raw);
    } else {
      bad_type = true;
      return false;
    }
    return true;
  });
  if (bad_type)
    return fail(502, "kv_transfer_params",
                "the prefill answer's kv_transfer_params is neither an object nor null");
  if (!ok) return fail(502, "body", "the prefill answer is not a JSON object");
  return params;
}

Result<std::string> vllmDecodeBody(std::string_view client_body,
                                   const std::optional<std::string>& params) {
  std::string append;
  if (params) append = "\"kv_transfer_params\":" + *params;
  return rewrite(client_body, {"kv_transfer_params"}, append);
}

Result<std::string> sglangBody(std::string_view client_body, std::string_view host, uint16_t port,
                               uint64_t room) {
  std::string h = host.find(':') != std::string_view::npos
                      ? "[" + std::string(host) + "]"  // IPv6, as SGLang's router brackets it
                      : std::string(host);
  std::string append = "\"bootstrap_host\":" + jsonString(h) + ",\"bootstrap_port\":" +
                       (port ? std::to_string(port) : std::string("null")) +
                       ",\"bootstrap_room\":" + std::to_string(room);
  return rewrite(client_body, {"bootstrap_host", "bootstrap_port", "bootstrap_room"}, append);
}

Result<std::string> trtllmContextBody(std::string_view client_body, uint64_t disagg_request_id) {
  std::string append =
      "\"disaggregated_params\":{\"request_type\":\"context_only\",\"disagg_request_id\":" +
      std::to_string(disagg_request_id) + "},\"stream\":false,\"stream_options\":null";
  return rewrite(client_body, {"disaggregated_params", "stream", "stream_options"}, append);
}

// The raw elements of a context answer's top-level "choices" array.
static Result<std::vector<std::string>> choicesOf(std::string_view answer) {
  std::string choices;  // (raw views die with forEachMember's buffer: copied)
  bool ok = forEachMember(answer, [&](std::string_view key, std::string_view raw) {
    if (key == "choices") choices.assign(raw);
    return true;
  });
  if (!ok) return fail(502, "body", "the context answer is not a JSON object");
  if (choices.empty() || choices.front() != '[')
    return fail(502, "choices", "the context answer has no choices");
  simdjson::padded_string padded(choices);
  od::parser parser;
  od::document doc;
  od::array arr;
  if (parser.iterate(padded).get(doc) || doc.get_array().get(arr))
    return fail(502, "choices", "the context answer's choices is not an array");
  std::vector<std::string> out;
  for (auto el : arr) {
    od::value v;
    std::string_view raw;
    if (el.get(v) || simdjson::to_json_string(v).get(raw))
      return fail(502, "choices", "the context answer's choices is malformed");
    out.emplace_back(raw);
  }
  return out;
}

Result<ContextAnswer> trtllmContextAnswer(std::string_view context_answer) {
  auto choices = choicesOf(context_answer);
  if (!choices) return tl::unexpected(choices.error());
  const std::string first = choices->empty() ? std::string() : choices->front();
  if (first.empty() || first.front() != '{')
    return fail(502, "choices", "the context answer has no choices[0] object");
  ContextAnswer a;
  std::string finish;
  bool has_finish = false;
  const bool ok = forEachMember(first, [&](std::string_view key, std::string_view raw) {
    if (key == "disaggregated_params" && !raw.empty() && raw.front() == '{') a.params.assign(raw);
    if (key == "finish_reason" && raw.size() >= 2 && raw.front() == '"') {
      finish.assign(raw.substr(1, raw.size() - 2));
      has_finish = true;
    }
    return true;
  });
  if (!ok) return fail(502, "choices", "the context answer's choices[0] is malformed");
  a.finished = has_finish && finish != "length" && finish != "not_finished";
  if (!a.finished && a.params.empty())
    return fail(502, "disaggregated_params",
                "the context answer carries no disaggregated_params object");
  return a;
}

Result<std::string> trtllmFinalAnswer(std::string_view context_answer, bool stream) {
  auto choices = choicesOf(context_answer);
  if (!choices) return tl::unexpected(choices.error());
  // choices with disaggregated_params dropped from each object.
  std::string out_choices = "[";
  for (const std::string& raw : *choices) {
    if (out_choices.size() > 1) out_choices += ',';
    if (!raw.empty() && raw.front() == '{') {
      auto c = rewrite(raw, {"disaggregated_params"}, {}, nullptr, "choices[]");
      if (!c) return tl::unexpected(c.error());
      out_choices += *c;
    } else {
      out_choices += raw;
    }
  }
  out_choices += ']';
  auto body = rewrite(context_answer, {"choices"}, "\"choices\":" + out_choices);
  if (!body) return body;
  if (!stream) return body;
  return "data: " + *body + "\n\ndata: [DONE]\n\n";
}

Result<std::string> trtllmGenerationBody(std::string_view client_body, std::string_view params) {
  auto p = rewrite(params, {"request_type"}, "\"request_type\":\"generation_only\"", nullptr,
                   "disaggregated_params");
  if (!p) return p;
  return rewrite(client_body, {"disaggregated_params"}, "\"disaggregated_params\":" + *p);
}

std::string pdRequestId(std::string_view prefill_addr, std::string_view decode_addr,
                        std::string_view id) {
  std::string out = "___prefill_addr_";
  out.append(prefill_addr).append("___decode_addr_").append(decode_addr).append("_").append(id);
  return out;
}

}  // namespace kvgate::engines::pd
