#include "proxy/facts_parser.h"

#include <simdjson.h>

#include <cctype>
#include <charconv>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/json_depth.h"
#include "tokenizer/json_dom.h"

namespace kvgate::proxy {
namespace {

static_assert(kFactsPadding == simdjson::SIMDJSON_PADDING);
using simdjson::ondemand::json_type;
using simdjson::ondemand::value;

simdjson::ondemand::parser& threadParser() {
  thread_local simdjson::ondemand::parser parser(kMaxParseBytes);
  return parser;
}

// Appends up to the remaining budget of `limit` bytes; counts every byte offered in `total`.
struct Renderer {
  std::string& out;
  size_t limit;
  size_t total = 0;
  bool full() const { return out.size() >= limit; }
  void add(std::string_view s) {
    total += s.size();
    if (!full()) out.append(s.substr(0, limit - out.size()));
  }
  void add(char c) {
    ++total;
    if (!full()) out.push_back(c);
  }
};

// Status of a walk over a JSON value: kFatal means the iterator hit a syntax or structure error
// (the whole body is then checked with the validating parser); kShape means "valid, but not the
// shape we key on".
enum class Walk { kOk, kShape, kFatal };

bool fatal(simdjson::error_code e) {
  return e != simdjson::SUCCESS && e != simdjson::INCORRECT_TYPE && e != simdjson::NUMBER_ERROR &&
         e != simdjson::NUMBER_OUT_OF_RANGE && e != simdjson::STRING_ERROR;
}

Walk walkOf(simdjson::error_code e) { return fatal(e) ? Walk::kFatal : Walk::kShape; }

// An object member's key, unescaped. A key simdjson cannot decode (a lone surrogate escape such
// as "\ud800", which Python's json accepts) can never equal one of the ASCII names we read, so
// it reads as the empty name and its value is skipped: the walk goes on to the end of the object
// and a later "model" is still seen. False only on a structural error.
template <class Field>  // a field, or simdjson's result of one
bool keyOf(Field& f, std::string_view& key) {
  auto e = f.unescaped_key().get(key);
  if (e == simdjson::STRING_ERROR) key = {};
  return e == simdjson::SUCCESS || e == simdjson::STRING_ERROR;
}

// A value's JSON type, and when it is a string, the string (unescaped) in `s`.
Walk typeAndString(value& v, json_type& t, std::string_view& s) {
  if (auto e = v.type().get(t)) return walkOf(e);
  if (t != json_type::string) return Walk::kOk;
  if (auto e = v.get_string().get(s)) return walkOf(e);
  return Walk::kOk;
}

// Content of one message: a string, or the "text" of its parts; null and other types add nothing.
Walk renderContent(value v, Renderer& r) {
  json_type t;
  std::string_view s;
  if (Walk w = typeAndString(v, t, s); w != Walk::kOk) return w;
  if (t == json_type::string) {
    r.add(s);
    return Walk::kOk;
  }
  if (t != json_type::array) return t == json_type::null ? Walk::kOk : Walk::kShape;
  simdjson::ondemand::array parts;
  if (auto e = v.get_array().get(parts)) return walkOf(e);
  for (auto part : parts) {
    simdjson::ondemand::object po;
    if (auto e = part.get_object().get(po)) {
      if (fatal(e)) return Walk::kFatal;
      continue;  // non-object parts carry no text
    }
    // (a repeated "text": the last one counts, as the engine reads the part)
    std::string_view text;
    bool has_text = false;
    for (auto f : po) {
      std::string_view k;
      if (!keyOf(f, k)) return Walk::kFatal;
      if (k != "text") continue;
      auto e = f.value().get_string().get(text);
      if (fatal(e)) return Walk::kFatal;
      has_text = e == simdjson::SUCCESS;
    }
    if (has_text) r.add(text);
  }
  return Walk::kOk;
}

Walk renderMessages(value v, Renderer& r) {
  simdjson::ondemand::array msgs;
  if (auto e = v.get_array().get(msgs)) return walkOf(e);
  Walk result = Walk::kOk;
  std::string role, content;
  for (auto m : msgs) {
    simdjson::ondemand::object mo;
    if (auto e = m.get_object().get(mo)) {
      if (fatal(e)) return Walk::kFatal;
      result = Walk::kShape;  // a non-object message: the prompt cannot be keyed
      continue;
    }
    role.clear();
    content.clear();
    Renderer c{content, r.limit};
    bool content_shape = false;  // the (last) content is of a shape the key does not cover
    for (auto mf : mo) {
      std::string_view mk;
      if (!keyOf(mf, mk)) return Walk::kFatal;
      value mv;
      if (mf.value().get(mv)) return Walk::kFatal;
      // (a repeated "role" or "content": the last one counts, as the engine reads the message)
      if (mk == "role") {
        std::string_view rs;
        auto e = mv.get_string().get(rs);
        if (e == simdjson::SUCCESS)
          role.assign(rs);
        else
          role.clear();
        if (fatal(e)) return Walk::kFatal;
      } else if (mk == "content") {
        content.clear();
        c.total = 0;
        Walk w = renderContent(mv, c);
        if (w == Walk::kFatal) return w;
        content_shape = w == Walk::kShape;
      }
    }
    if (content_shape) result = Walk::kShape;
    r.add(role);
    r.add('\x1f');
    r.add(content);
    r.total += c.total - content.size();  // content was cut at the budget: count all of it
    r.add('\x1e');
  }
  return result;
}

// renderMessages over the chat DOM the walk built (kNeedMessages): the same text, each member
// read once (a repeated "role", "content" or "text" counts once, with its last value, as the
// engine reads it).
Walk renderMessagesDom(const nlohmann::ordered_json& msgs, Renderer& r) {
  Walk result = Walk::kOk;
  std::string content;
  for (const auto& m : msgs) {
    if (!m.is_object()) {
      result = Walk::kShape;
      continue;
    }
    content.clear();
    Renderer c{content, r.limit};
    if (auto it = m.find("content"); it != m.end()) {
      if (it->is_string()) {
        c.add(it->get_ref<const std::string&>());
      } else if (it->is_array()) {
        for (const auto& part : *it) {
          if (!part.is_object()) continue;
          if (auto t = part.find("text"); t != part.end() && t->is_string())
            c.add(t->get_ref<const std::string&>());
        }
      } else if (!it->is_null()) {
        result = Walk::kShape;
      }
    }
    if (auto it = m.find("role"); it != m.end() && it->is_string())
      r.add(it->get_ref<const std::string&>());
    r.add('\x1f');
    r.add(content);
    r.total += c.total - content.size();  // content was cut at the budget: count all of it
    r.add('\x1e');
  }
  return result;
}

// "prompt": a string, or an array of token ids (rendered as "id," each); anything else (a
// number, a batch of prompts) is a shape the key does not cover.
Walk renderPrompt(value v, Renderer& r, routing::RequestFacts& f, uint32_t needs) {
  json_type t;
  std::string_view s;
  if (Walk w = typeAndString(v, t, s); w != Walk::kOk) return w;
  if (t == json_type::string) {
    r.add(s);
    if (needs & routing::kNeedPromptText) f.prompt_text.assign(s);
    return Walk::kOk;
  }
  if (t != json_type::array) return Walk::kShape;
  simdjson::ondemand::array ids;
  if (auto e = v.get_array().get(ids)) return walkOf(e);
  char num[24];
  for (auto id : ids) {
    int64_t x = 0;
    if (auto e = id.get_int64().get(x)) {
      if (fatal(e)) return Walk::kFatal;
      f.prompt_token_ids.clear();
      return Walk::kShape;  // a batch of prompts or a non-integer: no prompt key
    }
    if (needs & (routing::kNeedPromptText | routing::kNeedPromptTokenIds))
      f.prompt_token_ids.push_back(x);
    ++f.prompt_id_count;
    if (!r.full() || (needs & routing::kNeedPromptRender)) {  // Tier 1 counts them all
      auto [end, ec] = std::to_chars(num, num + sizeof num, x);
      r.add(std::string_view(num, static_cast<size_t>(end - num)));
      r.add(',');
    }
  }
  return Walk::kOk;
}

// A non-negative whole number, written as an integer, an integral float (1e5, 10.0), or a string
// of decimal digits ("100000": pydantic's lax mode, the engines' request models, converts it):
// what the engines accept.
bool wholeNumber(value v, int64_t& out, simdjson::error_code& e) {
  if (!(e = v.get_int64().get(out))) return out >= 0;
  std::string_view str;
  if (e == simdjson::INCORRECT_TYPE && !v.get_string().get(str)) {
    e = simdjson::SUCCESS;
    while (!str.empty() && (str.front() == ' ' || str.front() == '\t')) str.remove_prefix(1);
    while (!str.empty() && (str.back() == ' ' || str.back() == '\t')) str.remove_suffix(1);
    if (!str.empty() && str.front() == '+') str.remove_prefix(1);
    // pydantic also takes "4.0" and "4." (a fraction of zeros) as 4.
    if (const size_t dot = str.find('.'); dot != std::string_view::npos) {
      if (str.substr(dot + 1).find_first_not_of('0') != std::string_view::npos) return false;
      str = str.substr(0, dot);
    }
    if (str.empty() || str.size() > 15) return false;
    int64_t n = 0;
    for (char c : str) {
      if (c < '0' || c > '9') return false;
      n = n * 10 + (c - '0');
    }
    out = n;
    return true;
  }
  if (e != simdjson::INCORRECT_TYPE && e != simdjson::NUMBER_OUT_OF_RANGE) return false;
  double d = 0;
  if ((e = v.get_double().get(d))) return false;
  if (!(d >= 0 && d <= 9.0e15 && d == static_cast<double>(static_cast<int64_t>(d)))) return false;
  out = static_cast<int64_t>(d);
  return true;
}

// Optional request-shape facts: stream, stream_options (include_usage, and the raw object),
// max_tokens / max_completion_tokens / max_output_tokens (Responses API) (the larger), n, lora_path.
Walk readShape(std::string_view key, value v, routing::RequestFacts& f) {
  simdjson::error_code e = simdjson::SUCCESS;
  if (key == "stream") {
    // The last member counts (Python's json), read as pydantic's lax mode reads a bool: true and
    // false, 0 and 1, and the strings it accepts; anything else leaves the kind unknown.
    f.stream.reset();
    json_type t;
    if ((e = v.type().get(t))) return walkOf(e);
    if (t == json_type::boolean) {
      bool b;
      if (!(e = v.get_bool().get(b))) f.stream = b;
    } else if (t == json_type::number) {
      int64_t n = -1;
      if (!v.get_int64().get(n) && (n == 0 || n == 1)) f.stream = n == 1;
      e = simdjson::SUCCESS;
    } else if (t == json_type::string) {
      std::string_view sv;
      if (!(e = v.get_string().get(sv)) && sv.size() <= 5) {
        std::string l(sv);
        for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (l == "true" || l == "1" || l == "yes" || l == "on" || l == "t" || l == "y")
          f.stream = true;
        else if (l == "false" || l == "0" || l == "no" || l == "off" || l == "f" || l == "n")
          f.stream = false;
      }
      e = simdjson::SUCCESS;
    }
  } else if (key == "max_tokens" || key == "max_completion_tokens" || key == "max_output_tokens" ||
             key == "n") {
    json_type t;
    if ((e = v.type().get(t))) return walkOf(e);
    // The last member of each name counts (Python's json); null is the engine's default.
    std::optional<int64_t>& slot = key == "n"                       ? f.n
                                   : key == "max_tokens"            ? f.count_fields[0]
                                   : key == "max_completion_tokens" ? f.count_fields[1]
                                                                    : f.count_fields[2];
    slot.reset();
    if (t == json_type::null) return Walk::kOk;
    int64_t n = 0;
    if (!wholeNumber(v, n, e))
      f.counts_unreadable = true;  // the engine may read a count the gateway cannot
    else
      slot = n;
  } else if (key == "lora_path") {
    std::string_view s;
    if (!(e = v.get_string().get(s))) f.lora_adapter.assign(s);
  } else if (key == "stream_options") {
    f.has_stream_options = true;
    f.include_usage = false;  // (a repeated member: the last one counts)
    f.stream_options_json.clear();
    simdjson::ondemand::object o;
    if ((e = v.get_object().get(o))) return walkOf(e);
    std::string_view raw;
    if (o.raw_json().get(raw)) return Walk::kFatal;  // (consumes the object)
    if (raw.size() > kMaxFactString) return Walk::kOk;  // (kept as unknown: no usage asked)
    f.stream_options_json.assign(raw);
    // (the outer iterator has moved on: the small object is read on its own)
    auto j = nlohmann::json::parse(raw, nullptr, false);
    if (j.is_object())
      if (auto it = j.find("include_usage"); it != j.end() && it->is_boolean())
        f.include_usage = it->get<bool>();
    return Walk::kOk;
  }
  return fatal(e) ? Walk::kFatal : Walk::kOk;
}

// The members a chat template reads besides "messages" (tok::chatInputFromRequest).
bool isChatExtra(std::string_view key) {
  return key == "tools" || key == "documents" || key == "add_generation_prompt" ||
         key == "continue_final_message" || key == "add_special_tokens" ||
         key == "chat_template_kwargs";
}

// The chat template's input being built during the walk (RequestFacts::chat).
struct ChatBuild {
  tok::DomLimits lim;
  size_t used = 0;            // bytes converted so far (messages and the other members)
  bool dropped = false;       // a value could not be converted: no chat input for this request
  bool too_large = false;     // ... because the chat passed the bound
  bool error = false;         // ... because simdjson stopped in it (the walk stops: see parseFacts)
  bool saw_messages = false;  // the body has a "messages" array

  nlohmann::ordered_json& dom(routing::RequestFacts& f) {
    if (!f.chat)
      f.chat = std::make_shared<nlohmann::ordered_json>(nlohmann::ordered_json::object());
    return *f.chat;
  }
  // Converts v into dom[key]; kFatal only on a syntax or structure error.
  Walk add(std::string_view key, value v, routing::RequestFacts& f) {
    if (dropped) return Walk::kOk;  // (v is skipped by the walk)
    switch (tok::domFromValue(v, dom(f)[std::string(key)], lim, used)) {
      case tok::DomResult::kOk:
        return Walk::kOk;
      case tok::DomResult::kRefused:
        dropped = true;
        too_large = used > lim.max_bytes;
        return Walk::kOk;
      case tok::DomResult::kError:
        break;
    }
    dropped = error = true;
    return Walk::kFatal;
  }
};

// The members a chat template reads besides "messages", into the chat input (consumes v); a
// boolean add_special_tokens is also a fact of its own (completions tokenization), read from its
// token whether or not the chat input takes it.
Walk addChatExtra(std::string_view key, value v, routing::RequestFacts& f, ChatBuild& chat) {
  if (key == "add_special_tokens") {
    f.add_special_tokens.reset();  // (a repeated member: the last one counts)
    std::string_view raw = v.raw_json_token();
    while (!raw.empty() &&
           (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
      raw.remove_suffix(1);
    if (raw == "true" || raw == "false") f.add_special_tokens = raw == "true";
  }
  return chat.add(key, v, f);
}

// Walks the top-level object once, extracting the facts in `needs`.
Walk walkObject(simdjson::ondemand::object obj, uint32_t needs, Renderer& r,
                routing::RequestFacts& f, ChatBuild& chat) {
  bool seen_model = false;
  for (auto field : obj) {
    std::string_view key;
    if (!keyOf(field, key)) return Walk::kFatal;
    value v;
    if (field.value().get(v)) return Walk::kFatal;
    std::string_view s;
    simdjson::error_code e = simdjson::SUCCESS;
    if (key == "model") {
      // A repeated key: Python's json keeps the last, other readers the first: ambiguous.
      f.model_ambiguous |= seen_model;
      seen_model = true;
      f.has_model = false;
      f.model.clear();
      json_type t;
      if ((e = v.type().get(t))) {
      } else if (t == json_type::string) {
        if (!(e = v.get_string().get(s)) && s.size() <= kMaxFactString) {
          f.model.assign(s);
          f.has_model = true;
        } else {
          f.model_ambiguous = true;  // a string we could not decode, or too long to keep
        }
      }
    } else if (key == "cache_salt") {
      f.cache_salt.clear();
      if (!(e = v.get_string().get(s)) && s.size() <= kMaxFactString) f.cache_salt.assign(s);
    } else if (key == "user" && (needs & routing::kNeedUser)) {
      f.user.reset();
      if (!(e = v.get_string().get(s)) && s.size() <= kMaxFactString) f.user = std::string(s);
    } else if (key == "previous_response_id" && (needs & routing::kNeedResponseLink)) {
      f.previous_response_id.clear();  // (the last member counts; null: none)
      if (!(e = v.get_string().get(s)) && s.size() <= kMaxFactString)
        f.previous_response_id.assign(s);  // (not a string: none; the engine answers it)
    } else if (key == "request_id" && (needs & routing::kNeedResponseLink)) {
      f.response_request_id.clear();  // (vLLM names the new response after it: resp_ + it or it)
      if (!(e = v.get_string().get(s)) && s.size() <= kMaxFactString)
        f.response_request_id.assign(s);
    } else if (key == "user_id" && (needs & routing::kNeedUserId)) {
      f.user_id.reset();
      json_type t;
      if ((e = v.type().get(t))) {
      } else if (t == json_type::string) {
        if (!(e = v.get_string().get(s)) && s.size() <= kMaxFactString) f.user_id = std::string(s);
      } else if (t == json_type::number) {
        int64_t n = 0;
        if (!(e = v.get_int64().get(n))) f.user_id = std::to_string(n);
      }
    } else if (key == "messages" &&
               (needs & (routing::kNeedPromptPrefix | routing::kNeedMessages))) {
      f.prompt_prefix.clear();
      f.has_prompt = true;
      if (needs & routing::kNeedMessages) {
        // The template's input, converted in this walk (the only walk of these bytes).
        json_type t;
        if ((e = v.type().get(t))) {
        } else if (t != json_type::array) {
          f.has_prompt = false;  // (a repeated "messages": the last one counts)
          chat.saw_messages = false;
          if (f.chat) f.chat->erase("messages");
        } else {
          chat.saw_messages = true;
          if (chat.add(key, v, f) == Walk::kFatal) return Walk::kFatal;
        }
      } else {
        Walk w = renderMessages(v, r);
        if (w == Walk::kFatal) return w;
        if (w == Walk::kShape) f.has_prompt = false;
      }
    } else if (key == "prompt" && (needs & (routing::kNeedPromptPrefix | routing::kNeedPromptText |
                                            routing::kNeedPromptTokenIds))) {
      f.prompt_prefix.clear();
      f.prompt_text.clear();  // a repeated "prompt": the last one counts (as the engine reads it)
      f.prompt_token_ids.clear();
      f.prompt_id_count = 0;
      f.has_prompt = true;
      Walk w = renderPrompt(v, r, f, needs);
      if (w == Walk::kFatal) return w;
      if (w == Walk::kShape) f.has_prompt = false;
    } else if ((needs & routing::kNeedChatInput) && isChatExtra(key)) {
      if (addChatExtra(key, v, f, chat) == Walk::kFatal) return Walk::kFatal;
    } else if (needs & routing::kNeedRequestShape) {
      if (readShape(key, v, f) == Walk::kFatal) return Walk::kFatal;
    }
    if (fatal(e)) return Walk::kFatal;
  }
  return Walk::kOk;
}

// The validating parser decides when the streaming walk stopped on an error: is the body JSON?
bool isValidJson(const char* data, size_t len) {
  // One validating parser per thread (raw captures are checked on every chat request of a
  // Tier 1.5 rule); it gives back what a large body made it allocate.
  thread_local simdjson::dom::parser p(kMaxParseBytes);
  struct Shrink {
    simdjson::dom::parser& p;
    ~Shrink() {
      if (p.capacity() > kKeepParserBytes) {
        auto e = p.allocate(kKeepParserBytes, p.max_depth());
        (void)e;  // on failure the next parse allocates again
      }
    }
  } shrink{p};
  simdjson::padded_string copy(data, len);
  simdjson::dom::element doc;
  auto e = p.parse(copy).get(doc);
  // Too deep is still JSON; so is a lone surrogate escape (simdjson rejects it, Python accepts).
  return e == simdjson::SUCCESS || e == simdjson::DEPTH_ERROR || e == simdjson::STRING_ERROR;
}

}  // namespace

size_t factsParserCapacity() { return threadParser().capacity(); }

FactsStatus parseFacts(const char* data, size_t len, size_t capacity, uint32_t needs,
                       size_t prefix_bytes, routing::RequestFacts& out, size_t chat_max_bytes) {
  out.clear();
  // A UTF-8 byte order mark: Python's json.loads(bytes) accepts it (the engines read such a body).
  if (len >= 3 && static_cast<unsigned char>(data[0]) == 0xEF &&
      static_cast<unsigned char>(data[1]) == 0xBB && static_cast<unsigned char>(data[2]) == 0xBF) {
    data += 3;
    len -= 3;
    capacity = capacity >= 3 ? capacity - 3 : 0;
  }
  if (len > kMaxParseBytes) {
    out.model_ambiguous = true;  // not read: the model is unknown, not absent
    return FactsStatus::kTooLarge;
  }
  std::unique_ptr<simdjson::padded_string> copy;
  if (capacity < len + kFactsPadding) {  // no padding reserved by the caller: copy (rare)
    copy = std::make_unique<simdjson::padded_string>(data, len);
    data = copy->data();
    capacity = len + kFactsPadding;
  }
  auto& parser = threadParser();
  FactsStatus status = FactsStatus::kOk;
  // Tier 1 (kNeedPromptRender) renders further than the prefix key's K bytes.
  Renderer r{out.prompt_prefix, (needs & routing::kNeedPromptRender)
                                    ? std::max(prefix_bytes, size_t{16 * 1024})
                                    : prefix_bytes};
  out.prefix_key_len = prefix_bytes;
  ChatBuild chat;
  bool chat_error = false;
  chat.lim.max_depth = kMaxJsonDepth - 1;  // (the members sit one level below the body)
  chat.lim.max_bytes = chat_max_bytes;
  chat.lim.refuse_big_integers = true;  // (a float in our DOM, an int in Python's: not rendered)
  {
    simdjson::ondemand::document doc;
    simdjson::ondemand::object obj;
    Walk w = Walk::kOk;
    if (parser.iterate(data, len, capacity).get(doc)) {
      w = Walk::kFatal;
    } else if (doc.get_object().get(obj)) {
      w = Walk::kFatal;  // not an object: the validator tells JSON of another type from junk
      status = FactsStatus::kNotObject;
    } else {
      w = walkObject(obj, needs, r, out, chat);
      const char* rest = nullptr;
      if (w == Walk::kOk && doc.current_location().get(rest) == simdjson::SUCCESS)
        w = Walk::kFatal;  // bytes after the object: let the validator judge
    }
    if (w == Walk::kFatal && chat.error) {
      chat_error = true;  // (read again below, once this document is gone)
    } else if (w == Walk::kFatal) {
      bool valid = isValidJson(data, len);
      status = !valid                              ? FactsStatus::kInvalidJson
               : status == FactsStatus::kNotObject ? FactsStatus::kNotObject
                                                   : FactsStatus::kOk;
      out.has_prompt = false;  // the walk stopped part-way: no prompt key
      // (a JSON object whose walk stopped part-way: a "model" may follow where we stopped)
      if (status == FactsStatus::kOk) out.model_ambiguous = true;
    }
  }
  if (chat_error) {
    // simdjson stopped inside a chat member on what Python's json may read (NaN, Infinity, a
    // misplaced comma the engine then refuses): read the body as if nobody needed the prompt
    // (those members skipped, unvalidated): no chat input and no prompt; the engine judges it.
    constexpr uint32_t kPrompt = routing::kNeedPromptPrefix | routing::kNeedMessages |
                                 routing::kNeedChatInput | routing::kNeedPromptRender |
                                 routing::kNeedPromptText | routing::kNeedPromptTokenIds;
    const FactsStatus again =
        parseFacts(data, len, capacity, needs & ~kPrompt, prefix_bytes, out, chat_max_bytes);
    out.has_prompt = false;
    return again;
  }
  // The chat input: only a complete one, with a "messages" array, and only from a body that is
  // JSON (a walk stopped part-way leaves none).
  if (status != FactsStatus::kOk || chat.dropped || (out.chat && !out.chat->contains("messages")))
    out.chat.reset();
  out.chat_too_large = chat.too_large && chat.saw_messages;
  if (status == FactsStatus::kOk && chat.dropped && !out.chat_too_large && chat.saw_messages)
    out.has_prompt = false;  // (a member simdjson cannot decode: the engine judges the body)
  if (status == FactsStatus::kOk && (needs & routing::kNeedPromptPrefix) &&
      (needs & routing::kNeedMessages) && out.has_prompt) {
    if (out.chat) {
      if (renderMessagesDom((*out.chat)["messages"], r) != Walk::kOk) out.has_prompt = false;
    } else if (out.chat_too_large) {
      // Past the chat bound (not converted): the prefix from one more walk, of the messages only.
      simdjson::ondemand::document doc;
      simdjson::ondemand::object obj;
      bool rendered = false;
      if (!parser.iterate(data, len, capacity).get(doc) && !doc.get_object().get(obj)) {
        bool found = false;
        for (auto field : obj) {
          std::string_view key;
          if (!keyOf(field, key)) break;
          if (key != "messages") continue;
          // (the last "messages" counts; earlier ones are rendered and replaced)
          out.prompt_prefix.clear();
          r.total = 0;
          value mv;
          found = !field.value().get(mv) && renderMessages(mv, r) == Walk::kOk;
        }
        rendered = found;
      }
      if (!rendered) out.has_prompt = false;
    }
  }
  // max_tokens: the larger of the three names' (last) values.
  for (const auto& c : out.count_fields)
    if (c) out.max_tokens = std::max(*c, out.max_tokens.value_or(0));
  out.prompt_render_total = r.total;
  out.parsed = status == FactsStatus::kOk;
  if (!out.parsed) out.has_prompt = false;
  if (out.prompt_prefix.empty()) out.has_prompt = false;
  if (parser.capacity() > kKeepParserBytes) {  // do not pin ~6x the largest body ever seen
    auto e = parser.allocate(kKeepParserBytes, parser.max_depth());
    (void)e;  // on failure the next iterate() allocates again
  }
  return status;
}

}  // namespace kvgate::proxy
