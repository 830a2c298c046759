// The Responses API's chat form (openai_responses.h).
#include "engines/openai_responses.h"

namespace kvgate::engines::responses {

using ojson = nlohmann::ordered_json;

bool isResponsesPath(std::string_view target) {
  return target.substr(0, target.find('?')).ends_with("/v1/responses");
}

namespace {
bool idChars(std::string_view id) {
  if (id.empty() || id.size() > 256) return false;
  for (const char c : id)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}
}  // namespace

std::string_view storedResponseIdOfPath(std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  if (path.ends_with("/cancel")) path.remove_suffix(7);
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return {};
  const std::string_view id = path.substr(slash + 1);
  if (!path.substr(0, slash).ends_with("/v1/responses") || !idChars(id)) return {};
  return id;
}

std::string_view responseIdUnderPath(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  constexpr std::string_view kMark = "/v1/responses/";
  const size_t at = path.find(kMark);
  if (at == std::string_view::npos) return {};
  std::string_view id = path.substr(at + kMark.size());
  id = id.substr(0, id.find('/'));
  return idChars(id) ? id : std::string_view();
}

std::string_view storedResponseRequestId(std::string_view method, std::string_view target) {
  const std::string_view id = storedResponseIdOfPath(target);
  if (id.empty()) return {};
  const bool cancel = target.substr(0, target.find('?')).ends_with("/cancel");
  return (cancel ? method == "POST" : method == "GET" || method == "HEAD") ? id
                                                                           : std::string_view();
}

namespace {

bool fail(ChatForm& f, std::string why) {
  f.ok = false;
  f.error = std::move(why);
  f.chat = ojson();
  return false;
}

// A member that must be a string when present: absent or null -> "" (has = false).
bool optString(const ojson& o, const char* key, std::string& out, bool* has = nullptr) {
  out.clear();
  if (has) *has = false;
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  out = it->get<std::string>();
  if (has) *has = true;
  return true;
}

// The text of an item's first content part (a string content is itself).
bool firstText(const ojson& content, std::string& out) {
  out.clear();
  if (content.is_null()) return true;
  if (content.is_string()) {
    out = content.get<std::string>();
    return true;
  }
  if (!content.is_array()) return false;
  if (content.empty()) return true;
  const ojson& first = content[0];
  if (first.is_string()) {
    out = first.get<std::string>();
    return true;
  }
  if (!first.is_object()) return false;
  return optString(first, "text", out);
}

ojson* lastAssistant(ojson& messages) {
  if (messages.empty()) return nullptr;
  ojson& m = messages.back();
  return m.value("role", "") == "assistant" ? &m : nullptr;
}

bool convertItem(const ojson& item, ojson& messages, ChatForm& f) {
  if (!item.is_object()) return fail(f, "an input item is not an object");
  std::string type;
  if (!optString(item, "type", type)) return fail(f, "an input item's type is not a string");
  ojson* prev = lastAssistant(messages);
  if (type == "function_call") {
    std::string call_id, name, arguments;
    bool has_id = false, has_name = false, has_args = false;
    if (!optString(item, "call_id", call_id, &has_id) || !optString(item, "name", name, &has_name) ||
        !optString(item, "arguments", arguments, &has_args) || !has_id || !has_name || !has_args)
      return fail(f, "a function_call needs string call_id, name and arguments");
    if (item.contains("namespace") && !item["namespace"].is_null())
      return fail(f, "a namespaced function_call");
    ojson call = {{"id", call_id},
                  {"function", {{"name", name}, {"arguments", arguments}}},
                  {"type", "function"}};
    if (prev) {
      ojson& calls = (*prev)["tool_calls"];
      if (calls.is_null()) calls = ojson::array();
      calls.push_back(std::move(call));
      return true;
    }
    messages.push_back({{"role", "assistant"}, {"tool_calls", ojson::array({std::move(call)})}});
    return true;
  }
  if (type == "function_call_output") {
    std::string call_id;
    if (!optString(item, "call_id", call_id)) return fail(f, "a call_id is not a string");
    auto out = item.find("output");
    if (out == item.end() || !(out->is_string() || out->is_array()))
      return fail(f, "a function_call_output needs a string or list output");
    messages.push_back({{"role", "tool"}, {"content", *out}, {"tool_call_id", call_id}});
    return true;
  }
  if (type == "reasoning") {
    if (item.contains("encrypted_content") && !item["encrypted_content"].is_null())
      return fail(f, "encrypted reasoning content");
    std::string text;
    auto content = item.find("content");
    auto summary = item.find("summary");
    if (content != item.end() && content->is_array() && !content->empty()) {
      if (!firstText(*content, text)) return fail(f, "a reasoning content part has no text");
    } else if (summary != item.end() && summary->is_array() && !summary->empty()) {
      if (!firstText(*summary, text)) return fail(f, "a reasoning summary part has no text");
    }
    if (prev && !prev->contains("reasoning")) {
      (*prev)["reasoning"] = text;
      return true;
    }
    messages.push_back({{"role", "assistant"}, {"reasoning", text}});
    return true;
  }
  if (!type.empty() && type != "message") return fail(f, "an input item of type " + type);
  std::string role;
  if (!optString(item, "role", role) || role.empty()) return fail(f, "a message item needs a role");
  if (role == "assistant") {
    std::string text;
    if (!firstText(item.contains("content") ? item["content"] : ojson(), text))
      return fail(f, "an assistant message's content is not text");
    if (prev && !prev->contains("content")) {
      (*prev)["content"] = text;
      return true;
    }
    messages.push_back({{"role", "assistant"}, {"content", text}});
    return true;
  }
  if (role != "user" && role != "system" && role != "developer")
    return fail(f, "a message role is not user, system, developer or assistant");
  auto content = item.find("content");
  if (content == item.end() || !(content->is_string() || content->is_array()))
    return fail(f, "a message needs a string or list content");
  // (the message as given, with the members the engine's model keeps)
  ojson m = ojson::object();
  for (auto it = item.begin(); it != item.end(); ++it)
    if (it.key() == "role" || it.key() == "content" || it.key() == "type") m[it.key()] = it.value();
  messages.push_back(std::move(m));
  return true;
}

ChatForm convert(const ojson& j) {
  ChatForm f;
  if (!j.is_object()) return fail(f, "the body is not a JSON object"), f;
  if (j.contains("previous_response_id") && !j["previous_response_id"].is_null())
    return fail(f, "previous_response_id: the history is on the engine"), f;
  std::string model;
  if (!optString(j, "model", model)) return fail(f, "\"model\" must be a string"), f;
  ojson messages = ojson::array();
  std::string instructions;
  if (!optString(j, "instructions", instructions))
    return fail(f, "\"instructions\" must be a string"), f;
  if (!instructions.empty()) messages.push_back({{"role", "system"}, {"content", instructions}});
  auto in = j.find("input");
  if (in == j.end() || !(in->is_string() || in->is_array()))
    return fail(f, "\"input\" must be a string or a list"), f;
  if (in->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *in}});
  } else {
    for (const auto& item : *in)
      if (!convertItem(item, messages, f)) return f;
  }
  f.chat = ojson::object();
  f.chat["messages"] = std::move(messages);
  if (auto t = j.find("tools"); t != j.end() && !t->is_null()) {
    if (!t->is_array()) return fail(f, "\"tools\" must be a list"), f;
    // (vLLM: no tools at all -> none; tools that are all built-in -> an empty list)
    ojson tools = ojson::array();
    for (const auto& tool : *t) {
      if (!tool.is_object()) return fail(f, "a tool is not an object"), f;
      std::string type, name;
      if (!optString(tool, "type", type)) return fail(f, "a tool's type is not a string"), f;
      if (type == "namespace") return fail(f, "namespace tools are not converted"), f;
      if (type != "function") continue;  // (built-in tools are not rendered as functions)
      bool has_name = false;
      if (!optString(tool, "name", name, &has_name) || !has_name)
        return fail(f, "a function tool needs a string name"), f;
      auto d = tool.find("description");
      if (d != tool.end() && !d->is_null() && !d->is_string())
        return fail(f, "a tool description is not a string"), f;
      auto p = tool.find("parameters");
      if (p != tool.end() && !p->is_null() && !p->is_object())
        return fail(f, "a tool's parameters are not an object"), f;
      // FunctionDefinition's dump: its fields, then the tool's other members (extra="allow").
      ojson fn = ojson::object();
      fn["name"] = name;
      fn["description"] = d == tool.end() ? ojson() : *d;
      fn["parameters"] = p == tool.end() ? ojson() : *p;
      for (auto it = tool.begin(); it != tool.end(); ++it)
        if (it.key() != "type" && !fn.contains(it.key())) fn[it.key()] = it.value();
      tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    if (!t->empty()) f.chat["tools"] = std::move(tools);
  }
  // A last message or reasoning item still in progress or incomplete is continued, not
  // answered (vLLM's should_continue_final_message).
  if (in->is_array() && !in->empty()) {
    const ojson& last = in->back();
    std::string ltype, status;
    if (last.is_object() && optString(last, "type", ltype) && optString(last, "status", status) &&
        (ltype.empty() || ltype == "message" || ltype == "reasoning") &&
        (status == "in_progress" || status == "incomplete")) {
      f.chat["add_generation_prompt"] = false;
      f.chat["continue_final_message"] = true;
    }
  }
  // reasoning.effort reaches the template as reasoning_effort.
  if (auto r = j.find("reasoning"); r != j.end() && r->is_object()) {
    std::string effort;
    if (!optString(*r, "effort", effort)) return fail(f, "reasoning.effort is not a string"), f;
    if (!effort.empty()) f.chat["chat_template_kwargs"] = {{"reasoning_effort", effort}};
  }
  f.ok = true;
  return f;
}

}  // namespace

ChatForm toChatForm(const ojson& request) {
  try {  // (every member is type-checked; a body that still throws is not converted)
    return convert(request);
  } catch (const std::exception& e) {
    ChatForm f;
    fail(f, std::string("the body could not be converted: ") + e.what());
    return f;
  }
}

ChatForm toChat(std::string_view body) {
  ChatForm f;
  auto j = anthropic::parseObject(body, f);
  return j ? toChatForm(*j) : f;
}

}  // namespace kvgate::engines::responses
