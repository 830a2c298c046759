// Token usage of a relayed response, for quota settlement (issue 14 §2).
//
// UsageScanner reads the response body as it is relayed (de-chunked bytes, in any pieces) and
// keeps the last complete `"usage":{...}` member of a top-level JSON object it saw: the usage of
// an OpenAI-style JSON answer, or of a stream's include_usage chunk (each SSE event's payload is
// its own document); also the usage member of a top-level "response" object (the Responses API's
// response.completed event), with input_tokens/output_tokens read as prompt/completion tokens
// (also the Messages API's answer and its streams' message_delta usage, as reported; when a
// message_delta carries only output_tokens, as Anthropic's own API sends it (cumulative: the
// largest seen counts), the input count is the first message_start's, from its top-level
// "message" object's usage, which alone is never
// taken for the whole usage (a stream cut after it is settled as one without usage); its
// cache_read_input_tokens / cache_creation_input_tokens are not added, since SGLang counts them
// inside input_tokens and vLLM with prompt-token details outside it; so cached prompt tokens
// are charged on SGLang and not on such a vLLM). It follows strings and nesting, so neither
// completion text nor an object the engine echoes deeper down (a tool schema, metadata) is taken
// for usage. A usage object is captured up to 1 KiB (longer ones are ignored). It also counts a
// stream's data events (not [DONE]): the completion-token estimate when a stream ends without
// usage.
//
// SseUsageFilter is the relay's filter when the gateway asked for usage the client did not
// (stream_options.include_usage injected into the request): it passes every event through except
// the usage-only chunk (`"choices":[]` with a usage object), and removes the `"usage":null`
// member (any spacing) that include_usage adds to the other chunks, so the client sees what it
// asked for. Events end at a blank line (LF LF, CRLF CRLF or CR CR); an event longer than 64 KiB
// is passed through unexamined.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvgate::governance {

struct Usage {
  int64_t prompt_tokens = -1, completion_tokens = -1, total_tokens = -1;
  // Tokens to charge: total_tokens, else prompt + completion; -1 when neither is known.
  int64_t charge() const;
};

// Parses a usage object's text ({"prompt_tokens":..,...}); nullopt unless it is a JSON object
// with at least total_tokens or completion_tokens as non-negative integers.
std::optional<Usage> parseUsage(std::string_view object_text);

class UsageScanner {
 public:
  void reset();
  void feed(std::string_view bytes);
  const std::optional<Usage>& usage() const { return usage_; }
  uint64_t dataEvents() const { return data_events_; }

 private:
  void onByte(char c);
  void lex(char c);  // JSON strings and nesting outside a capture
  // kKey: in a top-level string that may be the key "usage"; kColon/kBrace: after it.
  enum class St : uint8_t { kScan, kKey, kColon, kBrace, kCapture };
  St st_ = St::kScan;
  int depth_ = 0;                // JSON nesting of the document being read
  bool in_str_ = false, esc_ = false;
  uint8_t key_len_ = 0;          // bytes of usage matched in the candidate key (255: no match)
  uint8_t resp_len_ = 0;         // bytes of "response" matched (a top-level key only)
  uint8_t msg_len_ = 0;          // bytes of "message" matched (a top-level key only)
  bool after_response_ = false;  // kColon/kBrace after the top-level key "response" or "message"
  bool message_ = false;         // ... it was "message" (a Messages API message_start)
  int resp_depth_ = 0;           // depth of the members of a top-level "response" object (0: none)
  bool in_message_ = false;      // ... the object is a top-level "message"
  int64_t start_input_ = -1;     // message_start's input_tokens (-1: none seen)
  bool output_only_ = false;     // usage_ is start_input_ + an output-only usage
  int cap_depth_ = 0;            // nesting inside the captured object
  std::string cap_;
  std::optional<Usage> usage_;
  // SSE data-event counting: the position in "data:" at a line start (-1: not at a line start).
  int line_ = 0;
  bool done_check_ = false;  // after "data:", looking at the payload's first bytes
  std::string head_;         // the payload's first bytes (to tell [DONE])
  uint64_t data_events_ = 0;
};

class SseUsageFilter {
 public:
  static constexpr size_t kMaxEvent = 64 * 1024;
  void reset();
  // Appends to `out` what the client should see of `in`.
  void feed(std::string_view in, std::string& out);
  // The stream ended: what is still held (an unterminated last event) goes out as it is.
  void finish(std::string& out);
  uint64_t dropped() const { return dropped_; }

 private:
  void emit(std::string_view event, std::string& out);
  std::string pending_;
  bool passthrough_ = false;  // inside an oversized event: forward until its end
  char last_[3] = {0, 0, 0};  // the last bytes forwarded in pass-through (to find the event end)
  uint64_t dropped_ = 0;
};

}  // namespace kvgate::governance
