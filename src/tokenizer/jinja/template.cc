// Template::compile / Template::render: lexer + parser once, then a fresh interpreter and arena per
// render (nothing mutable is shared, so concurrent renders of one Template are safe).
#include "tokenizer/jinja/template.h"

#include <new>

#include "tokenizer/jinja/convert.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace kvgate::jinja {

Result<Template> Template::compile(std::string_view source) {
  auto tokens = tokenize(source);
  if (!tokens) return tl::unexpected(tokens.error());
  auto prog = parse(*tokens);
  if (!prog) return tl::unexpected(prog.error());
  Template t;
  t.prog_ = std::shared_ptr<const Program>(std::move(*prog));
  return t;
}

Result<std::string> Template::render(const nlohmann::ordered_json& context,
                                     const RenderOptions& opts) const {
  if (!prog_) return jerr("template not compiled");
  try {  // only std::bad_alloc can escape the interpreter; keep the never-throws promise
    Heap heap;
    auto ctx = context.is_null() ? fromJson(nlohmann::ordered_json::object(), heap)
                                 : fromJson(context, heap);
    if (!ctx) return tl::unexpected(ctx.error());
    Interp interp(heap, opts.now);
    return interp.run(*prog_, *ctx);
  } catch (const std::bad_alloc&) {
    return jerr("out of memory while rendering the chat template");
  }
}

}  // namespace kvgate::jinja
