// The engines' /tokenize and /detokenize answered by the gateway. See tokenize_local.h.
#include "proxy/tokenize_local.h"

#include <xxhash.h>

#include <charconv>
#include <random>

#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace kvgate::proxy {
namespace {

using J = nlohmann::ordered_json;

// A boolean member with its default; false when present with another type (the engine's
// validation refuses it: forwarded).
bool flag(const J& body, const char* name, bool dflt, bool& out) {
  auto it = body.find(name);
  if (it == body.end()) {
    out = dflt;
    return true;
  }
  if (!it->is_boolean()) return false;
  out = it->get<bool>();
  return true;
}

// Present and not null.
bool given(const J& body, const char* name) {
  auto it = body.find(name);
  return it != body.end() && !it->is_null();
}

// Plain text messages only: a string role, content that is a string, null or text parts (a
// multimodal part is expanded by the engine's processor, which the gateway does not run), and
// at most a string name. Anything else (tool calls, tool results, reasoning, a name of another
// type) is forwarded: vLLM validates it, and it reaches the template through tojson, where
// Python's Jinja2 and the gateway's renderer can print values differently (1.0 and 1).
bool plainMessages(const J& messages) {
  for (const auto& m : messages) {
    if (!m.is_object()) return false;
    for (const auto& [k, v] : m.items()) {
      if (k == "role") {
        if (!v.is_string()) return false;
      } else if (k == "name") {
        if (!v.is_string()) return false;
      } else if (k == "content") {
        if (v.is_null() || v.is_string()) continue;
        if (!v.is_array()) return false;
        for (const auto& part : v)
          if (!part.is_object() || part.size() != 2 ||
              part.value("type", std::string()) != "text" || !part.contains("text") ||
              !part["text"].is_string())
            return false;
      } else {
        return false;
      }
    }
    if (!m.contains("role")) return false;
  }
  return true;
}

// chat_template_kwargs of booleans and strings only (enable_thinking, reasoning_effort, ...):
// numbers and containers can print differently in the two renderers.
bool plainKwargs(const J& body) {
  auto it = body.find("chat_template_kwargs");
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_object()) return false;
  for (const auto& [k, v] : it->items())
    if (!v.is_boolean() && !v.is_string()) return false;
  return true;
}

// The chat request's members the engine reads are bounded like the data plane's renders
// (tokenizer/request_tokenizer.h: raw messages and extras at most twice the text bound, at most
// 4096 messages), so a render costs the event loop time in proportion to the bound.
constexpr size_t kMaxChatMessages = 4096;

// The credentials' hash in a form's key: seeded per process, so no client can aim a value at
// another's form.
uint64_t authHash(std::string_view auth) {
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }();
  return XXH3_64bits_withSeed(auth.data(), auth.size(), seed);
}

}  // namespace

bool tokenizePathServed(TokenizeDialect dialect, std::string_view path) {
  if (path == "/tokenize" || path == "/detokenize") return dialect != TokenizeDialect::kOff;
  return dialect == TokenizeDialect::kSglang &&
         (path == "/v1/tokenize" || path == "/v1/detokenize");
}

std::optional<TokenizeRequest> readTokenizeRequest(TokenizeDialect dialect, TokenizeOp op,
                                                   const J& body, std::string_view auth,
                                                   const char** why) {
  *why = "";
  if (dialect == TokenizeDialect::kOff) return *why = "off", std::nullopt;
  if (!body.is_object()) return *why = "invalid", std::nullopt;
  auto m = body.find("model");
  if (m == body.end() || !m->is_string()) return *why = "no_model", std::nullopt;
  TokenizeRequest r;
  r.op = op;
  r.dialect = dialect;
  r.model = m->get<std::string>();
  if (op == TokenizeOp::kTokenize) {
    const bool has_prompt = body.contains("prompt"), has_messages = body.contains("messages");
    if (has_prompt == has_messages) return *why = "neither_or_both", std::nullopt;
    if (dialect == TokenizeDialect::kVllm) {
      // vLLM: return_token_strs is Optional[bool] (null: none asked).
      auto it = body.find("return_token_strs");
      if (it != body.end() && !it->is_null()) {
        if (!it->is_boolean()) return *why = "invalid", std::nullopt;
        r.token_strs = it->get<bool>();
      }
    }
    r.chat = has_messages;
    if (!r.chat) {
      // TokenizeCompletionRequest (vLLM) / TokenizeRequest (SGLang): a string prompt (SGLang's
      // list of prompts is forwarded), add_special_tokens default true.
      if (!body["prompt"].is_string() || !flag(body, "add_special_tokens", true, r.special))
        return *why = "invalid", std::nullopt;
    } else {
      // TokenizeChatRequest (vLLM; SGLang's chat form is forwarded), add_special_tokens
      // default false.
      if (dialect != TokenizeDialect::kVllm) return *why = "chat_form", std::nullopt;
      if (given(body, "chat_template") || given(body, "media_io_kwargs") ||
          given(body, "mm_processor_kwargs") || given(body, "tools") || !plainKwargs(body))
        return *why = "engine_only", std::nullopt;
      const auto& msgs = body["messages"];
      if (!msgs.is_array() || msgs.size() > kMaxChatMessages || !plainMessages(msgs))
        return *why = "engine_only", std::nullopt;
      // (plain bools: vLLM refuses null and other types)
      bool agp = true, cfm = false;
      if (!flag(body, "add_special_tokens", false, r.special) ||
          !flag(body, "add_generation_prompt", true, agp) ||
          !flag(body, "continue_final_message", false, cfm) || (agp && cfm))
        return *why = "invalid", std::nullopt;
    }
  } else {
    auto t = body.find("tokens");
    if (t == body.end() || !t->is_array()) return *why = "invalid", std::nullopt;
    if (t->size() > kMaxDetokenizeIds) return *why = "too_large", std::nullopt;
    // vLLM keeps special tokens; SGLang's skip_special_tokens defaults to true.
    if (dialect == TokenizeDialect::kSglang &&
        !flag(body, "skip_special_tokens", true, r.skip_special))
      return *why = "invalid", std::nullopt;
    r.ids.reserve(t->size());
    for (const auto& v : *t) {
      // (ids past 2^32 are an engine error; a negative or non-integer one a validation error)
      if (!v.is_number_unsigned() || v.get<uint64_t>() > UINT32_MAX)
        return *why = "invalid", std::nullopt;
      r.ids.push_back(v.get<uint32_t>());
    }
  }
  // The form's key: what decides the engine's answer besides the input itself.
  r.key = std::string(op == TokenizeOp::kTokenize ? "t" : "d") +
          (dialect == TokenizeDialect::kVllm ? "v" : "s") + (r.chat ? "c" : "p") +
          (r.special ? "1" : "0") + (r.token_strs ? "1" : "0") + (r.skip_special ? "1" : "0") +
          std::to_string(authHash(auth)) + ":" + r.model;
  return r;
}

std::optional<TokenizeAnswer> computeTokenizeAnswer(const TokenizeRequest& r, const J& body,
                                                    const tok::Tokenizer& tok, size_t text_bound,
                                                    const char** why) {
  TokenizeAnswer a;
  a.op = r.op;
  a.dialect = r.dialect;
  a.model = r.model;
  a.key = r.key;
  try {
    if (r.op == TokenizeOp::kDetokenize) {
      // (ids of added tokens whose decoded form depends on the engine's tokenizers version)
      for (uint32_t id : r.ids)
        if (tok.decoder().versionDependent(id)) return *why = "version_dependent", std::nullopt;
      auto raw = tok.decoder().decode(r.ids, r.skip_special, false);
      if (!raw) return *why = "decoder", std::nullopt;
      a.text = std::move(*raw);
      a.text_clean = tok::cleanUpTokenization(a.text);
      a.answer_bytes = 6 * a.text.size() + 4096;  // (every byte escaped at worst)
      return a;
    }
    std::vector<uint32_t> ids;
    if (!r.chat) {
      const auto& text = body["prompt"].get_ref<const std::string&>();
      if (text.size() > text_bound) return *why = "too_large", std::nullopt;
      ids = tok.encode(text, r.special);
    } else {
      // A template that prints today's date renders by the engine's clock and time zone.
      if (tok.chatTemplateSource().find("strftime_now") != std::string::npos)
        return *why = "engine_only", std::nullopt;
      // Only the members vLLM's TokenizeChatRequest declares reach the template (a chat
      // request's documents, say, are ignored by it).
      J chat = J::object();
      size_t raw = 0;
      for (const char* k : {"messages", "add_generation_prompt", "continue_final_message",
                            "add_special_tokens", "chat_template_kwargs", "tools"})
        if (auto it = body.find(k); it != body.end()) {
          raw += it->dump(-1, ' ', false, J::error_handler_t::replace).size();
          if (raw > 2 * text_bound) return *why = "too_large", std::nullopt;
          chat[k] = *it;
        }
      auto in = tok::chatInputFromRequest(chat, tok.templateWantsContentParts()
                                                    ? tok::ContentFormat::kOpenAI
                                                    : tok::ContentFormat::kString);
      if (!in) return *why = "invalid", std::nullopt;
      auto rendered = tok::renderChat(tok, *in);
      if (!rendered) return *why = "invalid", std::nullopt;
      if (rendered->size() > text_bound) return *why = "too_large", std::nullopt;
      ids = tok.encode(*rendered, in->add_special_tokens);
    }
    a.token_strs = "null";
    size_t strs_bytes = 0;
    if (r.token_strs) {
      J strs = J::array();
      for (uint32_t id : ids) {
        if (tok.decoder().versionDependent(id)) return *why = "version_dependent", std::nullopt;
        auto s = tok.decoder().token(id);
        strs.push_back(s ? J(std::string(*s)) : J(nullptr));
      }
      a.token_strs = strs.dump(-1, ' ', false, J::error_handler_t::replace);
      strs_bytes = a.token_strs.size();
    }
    a.ids = std::move(ids);
    // (ids of up to 10 digits and a comma each; the engine may escape what we did not)
    a.answer_bytes = 2 * (11 * a.ids.size() + strs_bytes) + 4096;
    return a;
  } catch (const std::exception&) {  // (a member of an unexpected type deep in a message)
    *why = "invalid";
    return std::nullopt;
  }
}

std::optional<TokenizeAnswer> buildTokenizeAnswer(TokenizeDialect dialect, TokenizeOp op,
                                                  const J& body, const tok::Tokenizer& tok,
                                                  size_t text_bound, const char** why,
                                                  std::string_view auth) {
  auto r = readTokenizeRequest(dialect, op, body, auth, why);
  if (!r) return std::nullopt;
  return computeTokenizeAnswer(*r, body, tok, text_bound, why);
}

std::optional<std::string> renderTokenizeAnswer(const TokenizeAnswer& a,
                                                const nlohmann::json& max_model_len, int8_t clean) {
  if (a.op == TokenizeOp::kTokenize) {
    if (!max_model_len.is_number()) return std::nullopt;
    // Written directly (the ids are most of it): vLLM's member order, or SGLang's.
    std::string ids = "[";
    ids.reserve(8 * a.ids.size() + 2);
    char num[16];
    for (size_t i = 0; i < a.ids.size(); ++i) {
      if (i) ids += ',';
      const auto [end, ec] = std::to_chars(num, num + sizeof num, a.ids[i]);
      ids.append(num, end);
    }
    ids += ']';
    const std::string count = std::to_string(a.ids.size()), mml = max_model_len.dump();
    if (a.dialect == TokenizeDialect::kVllm)
      return "{\"count\":" + count + ",\"max_model_len\":" + mml + ",\"tokens\":" + ids +
             ",\"token_strs\":" + a.token_strs + "}";
    return "{\"tokens\":" + ids + ",\"count\":" + count + ",\"max_model_len\":" + mml + "}";
  }
  if (clean < 0 && a.text != a.text_clean) return std::nullopt;
  J out = J::object();
  out[a.dialect == TokenizeDialect::kVllm ? "prompt" : "text"] = clean == 1 ? a.text_clean : a.text;
  return out.dump(-1, ' ', false, J::error_handler_t::replace);
}

TokenizeMirror::Learned* TokenizeMirror::touch(const std::string& key, bool create) {
  auto it = models_.find(key);
  if (it != models_.end()) {
    order_.splice(order_.begin(), order_, it->second.at);
    return &it->second.l;
  }
  if (!create) return nullptr;
  if (models_.size() >= kMaxModels) {
    models_.erase(order_.back());
    order_.pop_back();
  }
  order_.push_front(key);
  return &models_.emplace(key, Entry{Learned{}, order_.begin()}).first->second.l;
}

bool TokenizeMirror::blocked(std::string_view key) const {
  std::lock_guard g(mu_);
  auto it = models_.find(std::string(key));
  return it != models_.end() && it->second.l.mismatch;
}

void TokenizeMirror::refused(const TokenizeAnswer& a) {
  std::lock_guard g(mu_);
  touch(a.key, true)->mismatch = true;
}

TokenizeMirror::Use TokenizeMirror::decide(const TokenizeAnswer& a, uint32_t verify_every,
                                           std::string* body) {
  nlohmann::json mml;
  int8_t clean = -1;
  {
    std::lock_guard g(mu_);
    Learned* found = touch(a.key, false);
    if (!found) return Use::kCheck;  // (remembered once an engine answered)
    Learned& l = *found;
    if (l.mismatch) return Use::kForward;
    if (!l.verified) return Use::kCheck;
    if (verify_every && ++l.answered % verify_every == 0) return Use::kCheck;
    mml = l.max_model_len;
    clean = l.clean;
  }
  auto out = renderTokenizeAnswer(a, mml, clean);
  if (!out) return Use::kCheck;  // (this request decides what was not known)
  *body = std::move(*out);
  return Use::kAnswer;
}

bool TokenizeMirror::check(const TokenizeAnswer& a, std::string_view engine_body) {
  const nlohmann::json got = nlohmann::json::parse(engine_body, nullptr, false);
  bool match = false;
  nlohmann::json mml;
  int8_t clean = -1;
  if (got.is_object()) {
    if (a.op == TokenizeOp::kTokenize) {
      auto m = got.find("max_model_len");
      // (an integer: SGLang's model_max_length of 1e30, read as a double, would not print as
      // the engine prints it; such a form is not answered)
      if (m != got.end() && (m->is_number_integer() || m->is_number_unsigned())) {
        mml = *m;
        auto ours = renderTokenizeAnswer(a, mml, -1);
        match = ours && nlohmann::json::parse(*ours) == got;
      }
    } else {
      const char* name = a.dialect == TokenizeDialect::kVllm ? "prompt" : "text";
      if (got.size() == 1 && got.contains(name) && got[name].is_string()) {
        const auto& s = got[name].get_ref<const std::string&>();
        const bool raw = s == a.text, cleaned = s == a.text_clean;
        match = raw || cleaned;
        if (raw != cleaned) clean = cleaned ? 1 : 0;
      }
    }
  }
  std::lock_guard g(mu_);
  Learned& l = *touch(a.key, true);
  if (!match || l.mismatch) {
    l.mismatch = true;
    return false;
  }
  l.verified = true;
  if (a.op == TokenizeOp::kTokenize) {
    // (a new value, e.g. after the engine restarted with another --max-model-len, replaces it)
    l.max_model_len = mml;
  } else if (clean >= 0) {
    if (l.clean >= 0 && l.clean != clean) {
      l.mismatch = true;  // the engine cleaned one text up and not another: not one rule
      return false;
    }
    l.clean = clean;
  }
  return true;
}

}  // namespace kvgate::proxy
