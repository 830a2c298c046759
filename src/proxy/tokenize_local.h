// The engines' /tokenize and /detokenize answered by the gateway (docs/apis.md, "Tokenize and
// detokenize").
//
// Algorithm: for a rule of an engine whose answers we can compute (kvEngineType vllm or sglang)
// and a model whose tokenizer is in --models-dir, the gateway builds the answer the engine would
// give (buildTokenizeAnswer: the same ids, token strings and text; docs/apis.md lists what
// each dialect reads). Two things only the engine knows are learned from its own answers: a
// tokenize answer's max_model_len (vLLM: the served context length; SGLang: the tokenizer's
// model_max_length), and whether its detokenize applies transformers' clean-up (depends on the
// engine's transformers version and the model's config). So per rule, API and model
// and request form (TokenizeMirror: the key is the API, dialect, model, the form -- prompt or
// chat -- and its flags, and what the engine sees of the client's credentials):
//   - until an engine answer matched ours, every request of the form is forwarded and the
//     engine's 200 answer compared with what the gateway built (the check); a match records the
//     learned facts;
//   - afterwards the gateway answers itself, except every `verify_every`-th request, which is
//     forwarded and checked again;
//   - one mismatch (a 200 that differs: the engine's tokenizer, template or decode is not ours;
//     or a refusal, 400/404/405/415/422, of a request the gateway would have answered) stops
//     local answers for that form (logged, counted) until the rule's engines or tokenize
//     settings change or the gateway restarts: the gateway never answers a value it reads
//     differently from the engine.
// Only the paths the engine serves are answered (vLLM: /tokenize, /detokenize; SGLang also
// /v1/...); SGLang ignores a request's model, so its calls are answered only on a rule whose
// model pool names the model.
// A request the gateway cannot answer exactly (another dialect, an unknown or loading model,
// a prompt over the tokenizer's byte bound, multimodal content, a request chat template, token
// ids outside 0..2^32-1, an unparsable body) is forwarded unchanged and the engine answers.
// Knobs (rule serviceArguments): kvTokenizeLocal (verified, the default; off: always forward),
// kvTokenizeVerifyEvery (default 100; 0: check only until the first match).
#pragma once
#include <cstdint>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace kvgate::tok {
class Tokenizer;
}

namespace kvgate::proxy {

enum class TokenizeOp : uint8_t { kTokenize, kDetokenize };
enum class TokenizeDialect : uint8_t { kOff, kVllm, kSglang };

// What the gateway computed for one request, before the parts learned from the engine.
// One request as the engine reads it (cheap: no tokenizing), and the key of its form.
struct TokenizeRequest {
  TokenizeOp op = TokenizeOp::kTokenize;
  TokenizeDialect dialect = TokenizeDialect::kVllm;
  std::string model, key;
  bool chat = false;          // tokenize: the chat form
  bool special = true;        // tokenize: add_special_tokens
  bool token_strs = false;    // vLLM tokenize: return_token_strs
  bool skip_special = false;  // detokenize: special tokens dropped
  std::vector<uint32_t> ids;  // detokenize: the ids
};

// What the gateway computed for one request, before the parts learned from the engine.
struct TokenizeAnswer {
  TokenizeOp op = TokenizeOp::kTokenize;
  TokenizeDialect dialect = TokenizeDialect::kVllm;
  std::string model, key;
  std::vector<uint32_t> ids;     // tokenize: the ids
  std::string token_strs;        // tokenize: the token strings' JSON array, or "null"
  std::string text, text_clean;  // detokenize: decoded without and with transformers' clean-up
  size_t answer_bytes = 0;       // about the size of the engine's answer (the capture's bound)
};

// Bodies above this are forwarded (the DOM is built on the event loop), and so are detokenize
// calls of more ids than kMaxDetokenizeIds.
constexpr size_t kMaxTokenizeBody = 1 << 20;
constexpr size_t kMaxDetokenizeIds = 65536;

// Reads `body` as the engine would; nullopt with *why when the gateway forwards it. `auth`:
// the credentials the engine would see (Authorization and X-Api-Key as forwarded).
std::optional<TokenizeRequest> readTokenizeRequest(TokenizeDialect dialect, TokenizeOp op,
                                                   const nlohmann::ordered_json& body,
                                                   std::string_view auth, const char** why);
// The answer the engine would give, or nullopt with *why saying why the gateway forwards.
// `text_bound`: bytes of prompt text tokenized at most (the data plane's tokenizer bound).
std::optional<TokenizeAnswer> computeTokenizeAnswer(const TokenizeRequest& r,
                                                    const nlohmann::ordered_json& body,
                                                    const tok::Tokenizer& tok, size_t text_bound,
                                                    const char** why);
// Both (tests).
std::optional<TokenizeAnswer> buildTokenizeAnswer(TokenizeDialect dialect, TokenizeOp op,
                                                  const nlohmann::ordered_json& body,
                                                  const tok::Tokenizer& tok, size_t text_bound,
                                                  const char** why, std::string_view auth = {});
// The paths each dialect serves.
bool tokenizePathServed(TokenizeDialect dialect, std::string_view path);
// An engine status that refuses a request the gateway would have answered (a mismatch).
inline bool tokenizeRefusal(int status) {
  return status == 400 || status == 404 || status == 405 || status == 415 || status == 422;
}

class TokenizeMirror {
 public:
  // Forms remembered per rule: the least recently used is forgotten first (a forgotten form is
  // checked again, a mismatched one included).
  static constexpr size_t kMaxModels = 1024;

  enum class Use : uint8_t { kAnswer, kCheck, kForward };
  // The form's calls are forwarded unchecked (mismatched): not worth computing an answer.
  bool blocked(std::string_view key) const;
  // What to do with `a`: answer it (*body is the answer), forward it and check the engine's
  // answer, or forward it without a check (a mismatched or untracked model).
  Use decide(const TokenizeAnswer& a, uint32_t verify_every, std::string* body);
  // The engine's 200 answer to a checked request. True when it matched (facts learned); false
  // marks the form mismatched (and so does refused()).
  bool check(const TokenizeAnswer& a, std::string_view engine_body);
  void refused(const TokenizeAnswer& a);

 private:
  struct Learned {
    nlohmann::json max_model_len;  // tokenize: the engine's value (null: not learned)
    int8_t clean = -1;             // detokenize: clean-up applied (1), not (0), unknown (-1)
    bool verified = false, mismatch = false;
    uint64_t answered = 0;
  };
  mutable std::mutex mu_;  // held for a lookup or an update, never across I/O
  struct Entry {
    Learned l;
    std::list<std::string>::iterator at;  // in order_
  };
  // The form's entry, now the most recent; created (the least recent forgotten) with `create`.
  Learned* touch(const std::string& key, bool create);
  std::unordered_map<std::string, Entry> models_;
  std::list<std::string> order_;  // most recent first
};

// The answer's body from what was learned; nullopt when it does not decide (a detokenize whose
// two texts differ while the clean-up is unknown).
std::optional<std::string> renderTokenizeAnswer(const TokenizeAnswer& a,
                                                const nlohmann::json& max_model_len, int8_t clean);

}  // namespace kvgate::proxy
