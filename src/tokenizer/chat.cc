// OpenAI chat request -> template input -> prompt, following vLLM and transformers exactly as
// written down (with sources) in docs/chat-templates.md; section numbers below refer to it.
#include "tokenizer/chat.h"

#include <cctype>

#include "common/json_depth.h"
#include "tokenizer/jinja/text.h"

namespace kvgate::tok {

using J = nlohmann::ordered_json;

ContentFormat detectContentFormat(std::string_view src) {
  // §2a: vLLM walks the template AST for a for-loop over a message's content. We look for that
  // construct in the source: `for <x> in <msg>['content']` / `<msg>.content`, optionally through
  // a filter or slice. Verified on the shipped templates (Gemma-3 is "openai", the rest "string").
  // A hand-written scan (std::regex recurses per character and could overflow on a hostile
  // template): `for` WS NAME WS `in` WS [`(` WS] NAME (`[` WS QUOTE content QUOTE WS `]` |
  // `.content`).
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  const size_t n = src.size();
  for (size_t at = src.find("for"); at != std::string_view::npos; at = src.find("for", at + 1)) {
    if (at > 0 && word(src[at - 1])) continue;
    size_t i = at + 3;
    auto skipSpaces = [&](bool need) {
      size_t b = i;
      while (i < n && space(src[i])) ++i;
      return !need || i > b;
    };
    auto name = [&] {
      size_t b = i;
      while (i < n && word(src[i])) ++i;
      return i > b;
    };
    if (!skipSpaces(true) || !name() || !skipSpaces(true)) continue;
    if (src.compare(i, 2, "in") != 0) continue;
    i += 2;
    if (!skipSpaces(true)) continue;
    if (i < n && src[i] == '(') {
      ++i;
      skipSpaces(false);
    }
    if (!name()) continue;
    if (src.compare(i, 8, ".content") == 0 && (i + 8 >= n || !word(src[i + 8])))
      return ContentFormat::kOpenAI;
    if (i < n && src[i] == '[') {
      ++i;
      skipSpaces(false);
      if (i < n && (src[i] == '\'' || src[i] == '"')) {
        char q = src[i++];
        if (src.compare(i, 7, "content") == 0 && i + 7 < n && src[i + 7] == q) {
          i += 8;
          skipSpaces(false);
          if (i < n && src[i] == ']') return ContentFormat::kOpenAI;
        }
      }
    }
  }
  return ContentFormat::kString;
}

namespace {

Error bad(const std::string& where, const std::string& what) {
  return Error{400, where, false, where + ": " + what};
}

// §2.2: one content value -> "" / string (string format) or a list of parts (openai format).
Result<J> mapContent(const J& content, ContentFormat f, const std::string& where) {
  J parts = J::array();
  auto addText = [&](const J& v) {
    if (f == ContentFormat::kString) {
      if (v.is_string() && !v.get_ref<const std::string&>().empty()) parts.push_back(v);
    } else {
      parts.push_back(J{{"type", "text"}, {"text", v}});
    }
  };
  if (content.is_null()) {
    // an empty part list
  } else if (content.is_string()) {
    addText(content);
  } else if (content.is_array()) {
    static const char* kMedia[] = {"image_url",    "input_image", "audio_url",
                                   "input_audio",  "video_url",   "image_embeds",
                                   "audio_embeds", "image_pil",   "prompt_embeds"};
    for (const auto& p : content) {
      if (p.is_string()) {
        addText(p);
        continue;
      }
      if (!p.is_object())
        return tl::unexpected(bad(where, "each content part must be an object or a string"));
      std::string type =
          p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
      bool media = false;
      for (const char* m : kMedia)
        if (type == m || (type.empty() && p.contains(m))) media = true;
      if (media)
        return tl::unexpected(
            bad(where, "media content parts need a multimodal model; this model is text-only"));
      if (type.empty() && p.contains("tool_reference")) {  // vLLM: a bare tool_reference part
        if (f == ContentFormat::kString)
          addText(p["tool_reference"]);
        else
          parts.push_back(J{{"type", "tool_reference"}, {"name", p["tool_reference"]}});
        continue;
      }
      if (type.empty())
        return tl::unexpected(bad(where, "Missing 'type' field in multimodal part."));
      const char* key = nullptr;
      if (type == "text" || type == "input_text" || type == "output_text")
        key = "text";
      else if (type == "refusal")
        key = "refusal";
      else if (type == "thinking")
        key = "thinking";
      if (key) {
        if (!p.contains(key) || p[key].is_null()) {
          // vLLM skips a text/refusal part without a value; the other kinds are an error.
          if (type == "text" || type == "refusal") continue;
          return tl::unexpected(bad(where, "content part of type '" + type + "' has no text"));
        }
        if (!p[key].is_string())
          return tl::unexpected(bad(where, std::string("'") + key + "' must be a string"));
        addText(p[key]);
      } else if (type == "tool_reference") {
        J name = p.contains("name") ? p["name"] : J();
        if (f == ContentFormat::kString)
          addText(name);
        else
          parts.push_back(J{{"type", "tool_reference"}, {"name", name}});
      } else {
        return tl::unexpected(bad(where, "Unsupported chat content part type '" + type + "'"));
      }
    }
  } else {
    return tl::unexpected(bad(where, "content must be a string, an array of parts or null"));
  }
  if (f == ContentFormat::kOpenAI) return parts;
  std::string joined;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) joined += "\n";
    joined += parts[i].get<std::string>();
  }
  return J(joined);
}

// §2.8: function.arguments as a string is parsed (Python json.loads); bad, absent or scalar ->
// {}. A string nested deeper than the request limit is a 400 (vLLM fails on it too), since the
// parsed value is copied recursively afterwards.
Result<J> normalizeArguments(const J& a, const std::string& where) {
  if (a.is_object() || a.is_array()) return a;
  if (a.is_string()) {
    const std::string& text = a.get_ref<const std::string&>();
    if (!jsonDepthWithin(text)) return tl::unexpected(bad(where, "arguments nested too deeply"));
    J v = J::parse(text, nullptr, false);
    if (!v.is_discarded()) return v;
  }
  return J::object();
}

// §3: tools as pydantic's model_dump() of ChatCompletionToolsParam / FunctionDefinition.
Result<J> normalizeTools(const J& tools) {
  if (!tools.is_array()) return tl::unexpected(bad("tools", "must be an array"));
  J out = J::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object())
      return tl::unexpected(bad(where, "must be an object with a 'function' object"));
    const auto& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string())
      return tl::unexpected(bad(where + ".function", "needs a string 'name'"));
    J f = J::object();
    f["name"] = fn["name"];
    f["description"] = fn.contains("description") ? fn["description"] : J();
    f["parameters"] = fn.contains("parameters") ? fn["parameters"] : J();
    for (auto it = fn.begin(); it != fn.end(); ++it)
      if (it.key() != "name" && it.key() != "description" && it.key() != "parameters")
        f[it.key()] = it.value();
    J tool = J::object();
    tool["type"] = t.contains("type") && !t["type"].is_null() ? t["type"] : J("function");
    tool["function"] = std::move(f);
    for (auto it = t.begin(); it != t.end(); ++it)
      if (it.key() != "type" && it.key() != "function") tool[it.key()] = it.value();
    out.push_back(std::move(tool));
  }
  return out;
}

}  // namespace

Result<ChatInput> chatInputFromRequest(const J& body, ContentFormat f) {
  ChatInput in;
  if (!body.is_object()) return fail(400, "body", "the request body must be a JSON object");
  if (!body.contains("messages") || !body["messages"].is_array())
    return fail(400, "messages", "messages must be an array");
  const auto& msgs = body["messages"];
  for (size_t i = 0; i < msgs.size(); ++i) {
    const auto& m = msgs[i];
    std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return fail(400, where, where + " must be an object with a string role");
    std::string role = m["role"];
    auto c = mapContent(m.contains("content") ? m["content"] : J(), f, where + ".content");
    if (!c) return tl::unexpected(c.error());
    J out = J::object();
    out["role"] = role;
    out["content"] = std::move(*c);
    if (role == "assistant") {
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (!m["tool_calls"].is_array())
          return fail(400, where + ".tool_calls", where + ".tool_calls must be an array");
        J calls = m["tool_calls"];
        if (!calls.empty()) {
          for (auto& call : calls) {
            if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
              return fail(400, where + ".tool_calls",
                          where + ".tool_calls: a tool call needs a 'function' object");
            auto args = normalizeArguments(
                call["function"].contains("arguments") ? call["function"]["arguments"] : J(),
                where + ".tool_calls");
            if (!args) return tl::unexpected(args.error());
            call["function"]["arguments"] = std::move(*args);
          }
          out["tool_calls"] = std::move(calls);
        }
      }
      if (m.contains("reasoning") && !m["reasoning"].is_null()) {
        out["reasoning"] = m["reasoning"];
        out["reasoning_content"] = m["reasoning"];
      }
    }
    if (role == "tool") {
      if (m.contains("tool_call_id")) out["tool_call_id"] = m["tool_call_id"];
      if (out["content"].is_array()) {  // §2.5: text-only lists become a joined string
        bool text_only = true;
        std::string joined;
        for (size_t k = 0; k < out["content"].size(); ++k) {
          const auto& p = out["content"][k];
          if (p.value("type", std::string()) != "text" || !p["text"].is_string()) {
            text_only = false;
            break;
          }
          if (k) joined += "\n";
          joined += p["text"].get<std::string>();
        }
        if (text_only) out["content"] = joined;
      }
    }
    if (m.contains("name") && m["name"].is_string()) out["name"] = m["name"];
    if (m.contains("task") && m["task"].is_string()) out["task"] = m["task"];
    if (role == "developer") out["tools"] = m.contains("tools") ? m["tools"] : J();
    in.messages.push_back(std::move(out));
  }
  if (body.contains("tools") && !body["tools"].is_null()) {
    auto t = normalizeTools(body["tools"]);
    if (!t) return tl::unexpected(t.error());
    in.tools = std::move(*t);
  }
  if (body.contains("documents")) in.documents = body["documents"];
  auto flag = [&](const char* k, bool def) -> Result<bool> {
    if (!body.contains(k) || body[k].is_null()) return def;
    if (!body[k].is_boolean()) return fail(400, k, std::string(k) + " must be a boolean");
    return body[k].get<bool>();
  };
  auto agp = flag("add_generation_prompt", true);
  auto cfm = flag("continue_final_message", false);
  auto ast = flag("add_special_tokens", false);
  if (!agp) return tl::unexpected(agp.error());
  if (!cfm) return tl::unexpected(cfm.error());
  if (!ast) return tl::unexpected(ast.error());
  in.add_generation_prompt = *agp;
  in.continue_final_message = *cfm;
  in.add_special_tokens = *ast;
  if (in.add_generation_prompt && in.continue_final_message)
    return fail(400, "continue_final_message",
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    if (!body["chat_template_kwargs"].is_object())
      return fail(400, "chat_template_kwargs", "chat_template_kwargs must be an object");
    for (const char* k : {"chat_template", "tokenize", "messages"})
      if (body["chat_template_kwargs"].contains(k))
        return fail(400, "chat_template_kwargs",
                    std::string("chat_template_kwargs may not set '") + k + "'");
    in.kwargs = body["chat_template_kwargs"];
  }
  return in;
}

Result<std::string> renderChat(const Tokenizer& tok, const ChatInput& in,
                               const jinja::RenderOptions& opts) {
  const jinja::Template* t = tok.chatTemplate();
  if (!t)
    return fail(
        400, "chat_template",
        "the model has no chat template (tokenizer_config.json has no chat_template and there "
        "is no chat_template.jinja)");
  // §4: messages, tools, documents, add_generation_prompt, special tokens, then the kwargs.
  J ctx = J::object();
  ctx["messages"] = in.messages;
  ctx["tools"] = in.tools;
  ctx["documents"] = in.documents;
  ctx["add_generation_prompt"] = in.add_generation_prompt;
  for (auto it = tok.specialTokensMap().begin(); it != tok.specialTokensMap().end(); ++it)
    ctx[it.key()] = it.value();
  for (auto it = in.kwargs.begin(); it != in.kwargs.end(); ++it) ctx[it.key()] = it.value();
  bool cont = in.continue_final_message;
  if (in.kwargs.contains("continue_final_message") &&
      in.kwargs["continue_final_message"].is_boolean())
    cont = in.kwargs["continue_final_message"].get<bool>();
  ctx.erase("continue_final_message");
  if (cont && ctx["add_generation_prompt"].is_boolean() && ctx["add_generation_prompt"].get<bool>())
    return fail(400, "continue_final_message",
                "continue_final_message and add_generation_prompt are not compatible");
  auto r = t->render(ctx, opts);
  if (!r || !cont) return r;
  // §5: transformers cuts the prompt right after the final message's content.
  if (in.messages.empty()) return fail(400, "continue_final_message", "there is no final message");
  const J& last = in.messages.back()["content"];
  std::string final_text;
  bool found = last.is_string();
  if (found) final_text = last.get<std::string>();
  if (last.is_array())
    for (const auto& p : last)
      if (p.is_object() && p.contains("text") && p["text"].is_string()) {
        final_text = p["text"].get<std::string>();
        found = true;
      }
  if (!found)
    return fail(400, "continue_final_message", "the final message has no text content to continue");
  std::string stripped = jinja::text::pyStrip(final_text, nullptr, true, true);
  size_t loc = r->rfind(stripped);
  if (loc == std::string::npos)
    return fail(
        400, "continue_final_message",
        "the final message does not appear in the rendered prompt, so it cannot be continued");
  std::string lstripped = jinja::text::pyStrip(final_text, nullptr, true, false);
  // Python: rendered[loc : loc + len(final.lstrip())] == final  (so: no leading whitespace and
  // the full message is there) -> keep its trailing whitespace; else cut after the stripped text.
  bool keeps =
      lstripped.size() == final_text.size() && r->compare(loc, final_text.size(), final_text) == 0;
  size_t cut = keeps ? loc + lstripped.size() : loc + stripped.size();
  r->resize(cut);
  return r;
}

Result<std::vector<uint32_t>> encodeChat(const Tokenizer& tok, const J& body, std::string* rendered,
                                         const jinja::RenderOptions& opts) {
  auto in = chatInputFromRequest(
      body, tok.templateWantsContentParts() ? ContentFormat::kOpenAI : ContentFormat::kString);
  if (!in) return tl::unexpected(in.error());
  auto text = renderChat(tok, *in, opts);
  if (!text) return tl::unexpected(text.error());
  std::vector<uint32_t> ids = tok.encode(*text, in->add_special_tokens);
  if (rendered) *rendered = std::move(*text);
  return ids;
}

}  // namespace kvgate::tok
