// Fuzz target: chat templates (src/tokenizer/jinja, the engine models' chat_template). The input
// is a template source; it is compiled and rendered against a fixed conversation (messages with
// a tool call, tools, add_generation_prompt, bos/eos tokens). Properties: any template either
// fails to compile or render with a 400 chat_template error naming the problem, or renders;
// nothing crashes, throws, or runs without bound (the engine's own output, recursion and work
// caps hold: a render stays under its 16 MiB output limit).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tokenizer/jinja/template.h"

namespace {
void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1 << 14) return 0;
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2+2? <|im_end|> {{ x }}"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
        "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "4"},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "adds",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })");
  const std::string_view src(reinterpret_cast<const char*>(data), size);
  auto t = kvgate::jinja::Template::compile(src);
  if (!t) {
    check(t.error().code == 400 && !t.error().what.empty());
    return 0;
  }
  kvgate::jinja::RenderOptions o;
  o.now = 1733356800;  // (strftime_now: a fixed clock)
  auto out = t->render(ctx, o);
  if (!out) {
    check(t.has_value() && out.error().code == 400 && !out.error().what.empty());
    return 0;
  }
  check(out->size() <= (16u << 20));
  return 0;
}
