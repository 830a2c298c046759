// The `model` field of a form body, read as the Python engines read it (issue 28 §1.1).
//
// vLLM's and SGLang's audio endpoints (`/v1/audio/transcriptions`, `/v1/audio/translations`)
// take multipart/form-data and read `model` from the form (Starlette's form parser), so on a
// listener where the model decides something (a model pool, a key's allowed models, a quota) the
// gateway reads that field too instead of trusting an X-Model header or routing the body as
// model-less:
//   - application/x-www-form-urlencoded: `&`-separated pairs, each name and value
//     percent-decoded with '+' as a space (an invalid escape stays as written, as Python's
//     unquote_plus leaves it);
//   - multipart/form-data: the parts between `--boundary` lines; a part whose
//     Content-Disposition is `form-data` with `name="model"` and no filename gives the value (its
//     bytes up to the CRLF before the next delimiter).
// Only forms every reader reads alike are read: the parameters of Content-Type and of each
// part's Content-Disposition are parsed strictly (printable ASCII; names [A-Za-z0-9._-], so no
// RFC 2231 `name*`; no parameter twice; quoted values without backslashes; no `<...>` values), a
// `charset` other than UTF-8 is refused (Starlette decodes names and values with it), the body
// must start with the first delimiter (a delimiter found later may sit inside another form's
// field), the boundary is at most 70 bytes (RFC 2046), header lines are not folded, every part
// has a name, urlencoded bodies are ASCII (Starlette reads raw bytes as latin-1). Searches are
// linear (memmem).
// Outcomes: kNone (a form without a model field), kOne (exactly one; `model` holds it), kAmbiguous
// (the field more than once, a value over kMaxFormModel bytes or not UTF-8, or anything above the
// reader does not accept: the gateway refuses rather than guess), kNotForm (another content
// type).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace kvgate::proxy {

enum class FormModel { kNotForm, kNone, kOne, kAmbiguous };

constexpr size_t kMaxFormModel = 4096;

FormModel formModel(std::string_view content_type, std::string_view body, std::string& model);

}  // namespace kvgate::proxy
