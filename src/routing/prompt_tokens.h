// PromptTokens: the token ids of a request's text prompt, for stages that key on tokens (Tier 1.5).
//
// Routing stays free of JSON and tokenizer internals: the stage hands the request facts to this
// interface and gets ids or a reason. The implementation (tokenizer/request_tokenizer.h) renders
// chat requests with the model's template and tokenizes as the engine does; it never blocks the
// calling event loop (tokenizers load on a background thread; until loaded, the answer is
// kNotLoaded) and bounds the text it tokenizes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "routing/request_facts.h"

namespace kvgate::routing {

enum class TokensStatus : uint8_t {
  kOk,
  kTextEmpty,   // no prompt text and no messages
  kModelEmpty,  // no model named
  kNotLoaded,   // the model's tokenizer is loading, missing or broken
  kFailed,      // rendering or tokenizing failed (a malformed chat request, no template)
};

class PromptTokens {
 public:
  virtual ~PromptTokens() = default;
  // The FactNeeds bits the facts must carry for tokens().
  virtual uint32_t needs() const = 0;
  // Ids of the prompt (a completions prompt string, or a chat request rendered), at most the
  // implementation's byte bound of text; `out` is replaced. With `cut` (not null), how many ids
  // the bound left out, estimated (the cut text at 4 bytes an id, plus the ids dropped at the
  // cut); 0 when nothing was cut. Thread-safe, never blocks on I/O.
  virtual TokensStatus tokens(const RequestFacts& f, std::vector<uint32_t>& out,
                              size_t* cut = nullptr) const = 0;
  // Bytes of prompt text tokens() looks at; beyond it the text is cut (SIZE_MAX: never).
  virtual size_t textBound() const { return SIZE_MAX; }
};

}  // namespace kvgate::routing
