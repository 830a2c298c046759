// Public API of the chat-template engine: compile a HuggingFace chat template once, render it many
// times. Output matches @huggingface/jinja 0.5.11 (trim_blocks + lstrip_blocks); see the notes in
// interpreter.h, filters.cc and builtins.cc for where it differs from Python Jinja2.
#pragma once
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"  // kvgate::Result<T> = tl::expected<T, kvgate::Error>; kvgate::fail(code, source, what)

namespace kvgate::jinja {

struct RenderOptions {
  std::optional<std::time_t> now;  // clock for strftime_now (default: real time, local)
};

class Template {
 public:
  // Parses once. Syntax errors -> fail(400, "chat_template", "line L: <message>").
  static Result<Template> compile(std::string_view source);
  // Thread-safe (const, no shared mutable state). context: object whose keys are the template's
  // variables (messages, tools, add_generation_prompt, bos_token, ...). Runtime errors (type
  // errors, raise_exception("msg"), unknown filter, recursion/output limits) -> fail(400,
  // "chat_template", message). Never throws, never crashes.
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const RenderOptions& opts = {}) const;

 private:
  std::shared_ptr<const struct Program> prog_;
};

}  // namespace kvgate::jinja
