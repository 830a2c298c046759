// The Anthropic Messages API's chat form and errors (anthropic_messages.h).
#include "engines/anthropic_messages.h"

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
// text blocks (the billing header dropped).
void systemText(const ojson& v, std::string& out) {
  if (v.is_string()) {
    out += v.get_ref<const std::string&>();
    return;
  }
  if (!v.is_array()) return;
  for (const auto& b : v) {
    if (!b.is_object() || b.value("type", "") != "text") continue;
    auto t = b.find("text");
    if (t == b.end() || !t->is_string()) continue;
    const std::string& text = t->get_ref<const std::string&>();
    if (text.empty() || text.starts_with("x-anthropic-billing-header")) continue;
    out += text;
  }
}

std::string imageUrl(const ojson& source) {
  if (!source.is_object()) return "";
  if (source.value("type", "") == "url") return source.value("url", "");
  return "data:" + source.value("media_type", std::string("image/jpeg")) + ";base64," +
         source.value("data", "");
}

bool fail(ChatForm& f, std::string why) {
  f.ok = false;
  f.error = std::move(why);
  f.chat = ojson();
  return false;
}

// One non-system message into `out` (tool results first, then the message itself).
bool convertMessage(const ojson& msg, ojson& out, ChatForm& f) {
  const std::string& role = msg["role"].get_ref<const std::string&>();
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
    if (type == "text") {
      auto t = b.find("text");
      if (t != b.end() && t->is_string() && !t->get_ref<const std::string&>().empty())
        parts.push_back({{"type", "text"}, {"text", *t}});
    } else if (type == "image") {
      if (auto s = b.find("source"); s != b.end() && !s->is_null())
        parts.push_back({{"type", "image_url"}, {"image_url", {{"url", imageUrl(*s)}}}});
    } else if (type == "thinking") {
      if (auto t = b.find("thinking"); t != b.end() && t->is_string()) {
        reasoning += t->get_ref<const std::string&>();
        has_reasoning = true;
      }
    } else if (type == "tool_use") {
      const ojson input = b.contains("input") && !b["input"].is_null() && !b["input"].empty()
                              ? b["input"]
                              : ojson::object();
      calls.push_back({{"id", b.value("id", std::string())},
                       {"type", "function"},
                       {"function",
                        {{"name", b.value("name", std::string())}, {"arguments", pyDumps(input)}}}});
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
      ojson images = ojson::array();
      if (c && c->is_string()) {
        text = c->get<std::string>();
      } else if (c && c->is_array()) {
        bool first = true;
        for (const auto& item : *c) {
          if (!item.is_object()) continue;
          const std::string it = item.value("type", "");
          if (it == "text") {
            if (!first) text += '\n';
            first = false;
            text += item.value("text", "");
          } else if (it == "image") {
            std::string url = imageUrl(item.value("source", ojson::object()));
            if (!url.empty())
              images.push_back({{"type", "image_url"}, {"image_url", {{"url", std::move(url)}}}});
          }
        }
      }
      out.push_back({{"role", "tool"},
                     {"tool_call_id", b.value("tool_use_id", std::string())},
                     {"content", text}});
      if (!images.empty()) out.push_back({{"role", "user"}, {"content", std::move(images)}});
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

std::string pyDumps(const ojson& value) {
  std::string out;
  dumpTo(out, value);
  return out;
}

ChatForm toChat(std::string_view body, bool count_tokens) {
  ChatForm f;
  if (!jsonDepthWithin(body)) {
    fail(f, "the body is nested too deeply");
    return f;
  }
  ojson j = ojson::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    fail(f, "the body is not a JSON object");
    return f;
  }
  return toChatForm(j, count_tokens);
}

ChatForm toChatForm(const ojson& j, bool count_tokens) {
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
  ojson messages = ojson::array();
  std::string system;
  if (auto s = j.find("system"); s != j.end()) systemText(*s, system);
  for (const auto& m : *ms)
    if (m["role"] == "system") systemText(m["content"], system);
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
      if (auto d = tool.find("description"); d != tool.end() && !d->is_null())
        fn["description"] = *d;
      ojson params = tool.value("input_schema", ojson::object());
      if (params.is_object() && !params.contains("type")) params["type"] = "object";
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
