// The Anthropic Messages API's chat form and errors (anthropic_messages.h).
#include "engines/anthropic_messages.h"

#include <optional>

#include "common/json_depth.h"
#include "common/json_escape.h"

namespace kvgate::engines::anthropic {

using ojson = nlohmann::ordered_json;

Path pathOf(std::string_view target) {
  std::string_view p = target.substr(0, target.find('?'));
  if (p.ends_with("/v1/messages")) return Path::kMessages;
  if (p.ends_with("/v1/messages/count_tokens")) return Path::kCountTokens;
  return Path::kNone;
}

namespace {

// A member's string value: absent or null -> `dflt`; another type -> nullopt (a body the engine
// refuses). Never throws (nlohmann's value() does on a mismatched type).
std::optional<std::string> strOf(const ojson& o, const char* key, const char* dflt = "") {
  if (!o.is_object()) return std::string(dflt);
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::string(dflt);
  if (!it->is_string()) return std::nullopt;
  return it->get<std::string>();
}
bool isType(const ojson& o, std::string_view type) {
  if (!o.is_object()) return false;
  auto it = o.find("type");
  return it != o.end() && it->is_string() && it->get_ref<const std::string&>() == type;
}

void dumpTo(std::string& out, const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += '"';
        appendJsonEscaped(out, it.key(), true);
        out += "\": ";
        dumpTo(out, it.value());
      }
      out += '}';
      break;
    }
    case ojson::value_t::array: {
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += ", ";
        dumpTo(out, v[i]);
      }
      out += ']';
      break;
    }
    case ojson::value_t::string:
      out += '"';
      appendJsonEscaped(out, v.get_ref<const std::string&>(), true);
      out += '"';
      break;
    default:
      out += v.dump();  // numbers, booleans, null
  }
}

// The text of a "system" value or of a system message's content: a string, or its non-empty
// text blocks (the billing header dropped). False: a shape the engine refuses.
bool systemText(const ojson& v, std::string& out) {
  if (v.is_null()) return true;
  if (v.is_string()) {
    out += v.get_ref<const std::string&>();
    return true;
  }
  if (!v.is_array()) return false;
  for (const auto& b : v) {
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string()) return false;
    if (!isType(b, "text")) continue;
    auto text = strOf(b, "text");
    if (!text) return false;
    if (text->empty() || text->starts_with("x-anthropic-billing-header")) continue;
    out += *text;
  }
  return true;
}

// An image source as a URL ("" when it has none: not an object, or empty, which Python skips;
// nullopt when a member has a type the engine refuses).
std::optional<std::string> imageUrl(const ojson& source) {
  if (!source.is_object() || source.empty()) return std::string();
  if (isType(source, "url")) return strOf(source, "url");
  auto media = strOf(source, "media_type", "image/jpeg");
  auto data = strOf(source, "data");
  if (!media || !data) return std::nullopt;
  return "data:" + *media + ";base64," + *data;
}

bool fail(ChatForm& f, std::string why) {
  f.ok = false;
  f.error = std::move(why);
  f.chat = ojson();
  return false;
}

// One non-system message into `out` (tool results first, then the message itself).
bool convertMessage(const ojson& msg, ojson& out, ChatForm& f) {
  // (vLLM maps the roles "ctx" and "msg", which Claude Code sends, to "user")
  std::string role = msg["role"].get<std::string>();
  if (role == "ctx" || role == "msg") role = "user";
  const ojson& content = msg["content"];
  ojson m = ojson::object();
  m["role"] = role;
  if (content.is_string()) {
    m["content"] = content;
    out.push_back(std::move(m));
    return true;
  }
  ojson parts = ojson::array(), calls = ojson::array();
  std::string reasoning;
  bool has_reasoning = false;
  for (const auto& b : content) {
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      return fail(f, "a content block needs a string \"type\"");
    const std::string& type = b["type"].get_ref<const std::string&>();
    // (block members are typed by the engine's model: a present member of another type is a
    // body it refuses)
    if (type == "text") {
      auto t = strOf(b, "text");
      if (!t) return fail(f, "a text block's text is not a string");
      if (!t->empty()) parts.push_back({{"type", "text"}, {"text", *t}});
    } else if (type == "image") {
      auto s = b.find("source");
      if (s != b.end() && !s->is_null() && !s->is_object())
        return fail(f, "an image block's source is not an object");
      if (s != b.end() && s->is_object() && !s->empty()) {
        auto url = imageUrl(*s);
        if (!url) return fail(f, "an image source member is not a string");
        parts.push_back({{"type", "image_url"}, {"image_url", {{"url", *url}}}});
      }
    } else if (type == "thinking") {
      if (auto t = b.find("thinking"); t != b.end() && !t->is_null()) {
        if (!t->is_string()) return fail(f, "a thinking block's thinking is not a string");
        reasoning += t->get_ref<const std::string&>();
        has_reasoning = true;
      }
    } else if (type == "tool_use") {
      auto in = b.find("input");
      if (in != b.end() && !in->is_null() && !in->is_object())
        return fail(f, "a tool_use input is not an object");
      const ojson input = in != b.end() && in->is_object() ? *in : ojson::object();
      auto id = strOf(b, "id"), name = strOf(b, "name");
      if (!id || !name) return fail(f, "a tool_use id or name is not a string");
      calls.push_back({{"id", *id},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", pyDumps(input)}}}});
    } else if (type == "tool_result") {
      const ojson* c = b.contains("content") ? &b["content"] : nullptr;
      if (role != "user") {  // "Tool result: " + Python's str() of the content
        if (c && !c->is_null() && !c->is_string())
          return fail(f, "an assistant's tool_result with non-string content");
        const std::string text = c && c->is_string() ? c->get<std::string>() : "";
        parts.push_back({{"type", "text"}, {"text", "Tool result: " + text}});
        continue;
      }
      std::string text;
      ojson images = ojson::array(), refs = ojson::array();
      if (c && c->is_string()) {
        text = c->get<std::string>();
      } else if (c && c->is_array()) {
        bool first = true;
        for (const auto& item : *c) {
          if (isType(item, "text")) {  // (Python: item.get("text", ""); None cannot be joined)
            auto t = strOf(item, "text");
            if (!t || (item.contains("text") && item["text"].is_null()))
              return fail(f, "a tool_result text item whose text is not a string");
            if (!first) text += '\n';
            first = false;
            text += *t;
          } else if (isType(item, "image")) {  // (Python: item.get("source", {}))
            auto src = item.find("source");
            std::optional<std::string> url;
            if (src == item.end())
              url = "data:image/jpeg;base64,";
            else if (!src->is_object())
              return fail(f, "an image source is not an object");
            else
              url = src->empty() ? std::optional<std::string>("data:image/jpeg;base64,")
                                 : imageUrl(*src);
            if (!url) return fail(f, "an image source member is not a string");
            images.push_back({{"type", "image_url"}, {"image_url", {{"url", std::move(*url)}}}});
          } else if (isType(item, "tool_reference")) {
            auto name = strOf(item, "tool_name");
            if (name && name->empty()) name = strOf(item, "name");
            if (!name) return fail(f, "a tool_reference name is not a string");
            if (!name->empty()) refs.push_back({{"type", "tool_reference"}, {"name", *name}});
          }
        }
      }
      auto id = strOf(b, "tool_use_id");
      if (!id) return fail(f, "a tool_result tool_use_id is not a string");
      out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", text}});
      if (!images.empty()) out.push_back({{"role", "user"}, {"content", std::move(images)}});
      if (!refs.empty())
        out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", std::move(refs)}});
    }
    // redacted_thinking, tool_reference and unknown types: nothing
  }
  if (has_reasoning) m["reasoning"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  if (parts.size() == 1 && parts[0]["type"] == "text")
    m["content"] = parts[0]["text"];
  else if (!parts.empty())
    m["content"] = std::move(parts);
  if (role == "user" && !m.contains("content")) return true;  // dropped
  out.push_back(std::move(m));
  return true;
}

}  // namespace

namespace {
ChatForm convert(const ojson& j, bool count_tokens);
}  // namespace

std::string pyDumps(const ojson& value) {
  std::string out;
  dumpTo(out, value);
  return out;
}

std::optional<ojson> parseObject(std::string_view body, ChatForm& f) {
  if (!jsonDepthWithin(body)) {
    fail(f, "the body is nested too deeply");
    return std::nullopt;
  }
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    fail(f, "the body is not a JSON object");
    return std::nullopt;
  }
  return j;
}

ChatForm toChat(std::string_view body, bool count_tokens) {
  ChatForm f;
  auto j = parseObject(body, f);
  return j ? toChatForm(*j, count_tokens) : f;
}

ChatForm toChatForm(const ojson& j, bool count_tokens) {
  // (every member is type-checked before it is read; this catch is the last line: a body that
  // still made nlohmann throw is one the conversion does not take, never a thrown request)
  try {
    return convert(j, count_tokens);
  } catch (const std::exception& e) {
    ChatForm f;
    fail(f, std::string("the body could not be converted: ") + e.what());
    return f;
  }
}

namespace {
ChatForm convert(const ojson& j, bool count_tokens) {
  ChatForm f;
  if (!j.is_object()) return fail(f, "the body is not a JSON object"), f;
  if (!j.contains("model") || !j["model"].is_string())
    return fail(f, "\"model\" must be a string"), f;
  if (!count_tokens) {
    auto mt = j.find("max_tokens");
    if (mt == j.end() || !mt->is_number_integer() || mt->get<int64_t>() <= 0)
      return fail(f, "\"max_tokens\" must be an integer greater than 0"), f;
  }
  auto ms = j.find("messages");
  if (ms == j.end() || !ms->is_array()) return fail(f, "\"messages\" must be a list"), f;
  for (const auto& m : *ms) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
        !m.contains("content") || !(m["content"].is_string() || m["content"].is_array()))
      return fail(f, "each message needs a string \"role\" and a string or list \"content\""), f;
  }
  for (const auto& m : *ms) {
    const std::string& role = m["role"].get_ref<const std::string&>();
    if (role != "user" && role != "assistant" && role != "system" && role != "ctx" && role != "msg")
      return fail(f, "a message role is not user, assistant or system"), f;
  }
  ojson messages = ojson::array();
  std::string system;
  if (auto s = j.find("system"); s != j.end() && !systemText(*s, system))
    return fail(f, "\"system\" must be a string or a list of text blocks"), f;
  for (const auto& m : *ms)
    if (m["role"] == "system" && !systemText(m["content"], system))
      return fail(f, "a system message's content is not text"), f;
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  for (const auto& m : *ms) {
    if (m["role"] == "system") continue;
    if (!convertMessage(m, messages, f)) return f;
  }
  f.chat = ojson::object();
  f.chat["messages"] = std::move(messages);
  if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
    if (!t->is_array()) return fail(f, "\"tools\" must be a list"), f;
    ojson tools = ojson::array();
    for (const auto& tool : *t) {
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string())
        return fail(f, "each tool needs a string \"name\""), f;
      ojson fn = ojson::object();
      fn["name"] = tool["name"];
      if (auto d = tool.find("description"); d != tool.end() && !d->is_null()) {
        if (!d->is_string()) return fail(f, "a tool description is not a string"), f;
        fn["description"] = *d;
      }
      auto schema = tool.find("input_schema");
      if (schema == tool.end() || !schema->is_object())
        return fail(f, "each tool needs an object \"input_schema\""), f;
      ojson params = *schema;
      if (!params.contains("type")) params["type"] = "object";
      fn["parameters"] = std::move(params);
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    f.chat["tools"] = std::move(tools);
  }
  if (auto k = j.find("chat_template_kwargs"); k != j.end() && k->is_object())
    f.chat["chat_template_kwargs"] = *k;
  f.ok = true;
  return f;
}
}  // namespace

const char* errorType(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 402:
      return "billing_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 408:
    case 504:
      return "timeout_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string errorBody(std::string_view type, std::string_view message) {
  std::string out = "{\"type\":\"error\",\"error\":{\"type\":\"";
  appendJsonEscaped(out, type);
  out += "\",\"message\":\"";
  appendJsonEscaped(out, message);
  out += "\"}}";
  return out;
}

}  // namespace kvgate::engines::anthropic
