#include "governance/usage.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kvgate::governance {

namespace {
constexpr size_t kMaxUsageObject = 1024;
constexpr std::string_view kData = "data:";
}  // namespace

int64_t Usage::charge() const {
  constexpr int64_t kCap = int64_t(1) << 50;  // (no overflow below; the ledger clamps further)
  if (total_tokens >= 0) return std::min(total_tokens, kCap);
  if (completion_tokens >= 0)
    return std::min(kCap, std::min(std::max<int64_t>(0, prompt_tokens), kCap) +
                              std::min(completion_tokens, kCap));
  return -1;
}

std::optional<Usage> parseUsage(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  Usage u;
  auto field = [&](const char* name, int64_t& into) {
    auto it = j.find(name);
    if (it != j.end() && (it->is_number_unsigned() || it->is_number_integer()) &&
        it->get<int64_t>() >= 0)
      into = it->get<int64_t>();
  };
  field("prompt_tokens", u.prompt_tokens);
  field("completion_tokens", u.completion_tokens);
  // The Responses API names them input_tokens and output_tokens: taken as a pair only (an
  // output count alone, as other APIs' deltas send, would charge no prompt).
  if (u.prompt_tokens < 0 && u.completion_tokens < 0) {
    Usage r;
    field("input_tokens", r.prompt_tokens);
    field("output_tokens", r.completion_tokens);
    if (r.prompt_tokens >= 0 && r.completion_tokens >= 0) {
      u.prompt_tokens = r.prompt_tokens;
      u.completion_tokens = r.completion_tokens;
    }
  }
  field("total_tokens", u.total_tokens);
  if (u.charge() < 0) return std::nullopt;
  return u;
}

namespace {
// One non-negative integer member of a usage object's text, alone of the token counts that make
// a usage: message_start's input_tokens, or an Anthropic message_delta's output_tokens. -1 when
// absent, or when the object is not JSON.
int64_t countIn(std::string_view text, const char* name) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return -1;
  auto it = j.find(name);
  if (it == j.end() || !(it->is_number_unsigned() || it->is_number_integer())) return -1;
  const int64_t v = it->get<int64_t>();
  return v >= 0 ? v : -1;
}
}  // namespace

void UsageScanner::reset() { *this = UsageScanner(); }

void UsageScanner::feed(std::string_view bytes) {
  for (char c : bytes) onByte(c);
}

void UsageScanner::onByte(char c) {
  // SSE data events (a line starting "data:"), [DONE] excepted.
  if (c == '\n' || c == '\r') {
    if (done_check_) {
      std::string_view h = head_;
      if (h.starts_with(' ')) h.remove_prefix(1);
      if (h == "[DONE]") --data_events_;
      done_check_ = false;
    }
    line_ = 0;
  } else if (done_check_) {
    if (head_.size() < 8) head_ += c;
  } else if (line_ >= 0) {
    if (c == kData[size_t(line_)]) {
      if (++line_ == int(kData.size())) {
        ++data_events_;
        done_check_ = true;
        head_.clear();
        line_ = -1;
      }
    } else {
      line_ = -1;
    }
  }

  // "usage" : { ... } as a member of a top-level object.
  if (st_ == St::kCapture) {
    cap_ += c;
    if (in_str_) {
      if (esc_) esc_ = false;
      else if (c == '\\') esc_ = true;
      else if (c == '"') in_str_ = false;
    } else if (c == '"') {
      in_str_ = true;
    } else if (c == '{' || c == '[') {
      ++cap_depth_;
    } else if ((c == '}' || c == ']') && --cap_depth_ == 0) {
      if (in_message_ && resp_depth_ && depth_ == resp_depth_) {
        // message_start's usage: the input count only, for a message_delta that has none (the
        // first message_start's: a message has one).
        if (const int64_t in = countIn(cap_, "input_tokens"); in >= 0 && start_input_ < 0)
          start_input_ = in;
      } else if (auto u = parseUsage(cap_)) {
        usage_ = *u;
        output_only_ = false;
      } else if (const int64_t out = countIn(cap_, "output_tokens");
                 out >= 0 && start_input_ >= 0 && (!usage_ || output_only_)) {
        // Anthropic's message_delta (output only, cumulative: the largest seen); never over a
        // whole usage.
        const int64_t before = usage_ ? usage_->completion_tokens : 0;
        usage_ = Usage{start_input_, std::max(out, before), -1};
        output_only_ = true;
      }
      st_ = St::kScan;
      cap_.clear();
    }
    if (st_ == St::kCapture && cap_.size() > kMaxUsageObject) {
      depth_ += cap_depth_;  // (too long: not taken; the lexer goes on inside it)
      st_ = St::kScan;
      cap_.clear();
    }
    return;
  }
  if ((st_ == St::kColon || st_ == St::kBrace) &&
      (c == ' ' || c == '\t' || c == '\n' || c == '\r'))
    return;
  if (st_ == St::kColon) {
    st_ = St::kScan;
    if (c == ':') {
      st_ = St::kBrace;
      return;
    }
    after_response_ = false;
  } else if (st_ == St::kBrace) {
    st_ = St::kScan;
    if (after_response_) {
      // "response": { ... } (a Responses API stream event): its "usage" member counts too;
      // "message": { ... } (a Messages API message_start): its usage's input count is kept.
      after_response_ = false;
      if (c == '{') {
        resp_depth_ = depth_ + 1;
        in_message_ = message_;
      }
    } else if (c == '{') {
      st_ = St::kCapture;
      cap_.assign(1, c);
      cap_depth_ = 1;
      return;
    }
  }
  lex(c);
}

void UsageScanner::lex(char c) {
  if (in_str_) {
    if (c == '\n' || c == '\r') {  // (a raw line break never is inside a JSON string: resync)
      in_str_ = esc_ = after_response_ = in_message_ = false;
      depth_ = resp_depth_ = 0;
      st_ = St::kScan;
      return;
    }
    if (esc_) {
      esc_ = false;
      key_len_ = resp_len_ = msg_len_ = 255;
      return;
    }
    if (c == '\\') {
      esc_ = true;
      key_len_ = resp_len_ = msg_len_ = 255;
      return;
    }
    if (c == '"') {
      in_str_ = false;
      if (st_ == St::kKey && key_len_ == 5) {
        st_ = St::kColon;
      } else if (st_ == St::kKey && (resp_len_ == 8 || msg_len_ == 7)) {
        st_ = St::kColon;
        after_response_ = true;
        message_ = msg_len_ == 7;
      } else {
        st_ = St::kScan;
      }
      return;
    }
    if (st_ == St::kKey) {
      key_len_ = key_len_ < 5 && c == "usage"[key_len_] ? uint8_t(key_len_ + 1) : uint8_t(255);
      resp_len_ = depth_ == 1 && resp_len_ < 8 && c == "response"[resp_len_]
                      ? uint8_t(resp_len_ + 1)
                      : uint8_t(255);
      msg_len_ = depth_ == 1 && msg_len_ < 7 && c == "message"[msg_len_] ? uint8_t(msg_len_ + 1)
                                                                         : uint8_t(255);
    }
    return;
  }
  if (c == '"') {
    in_str_ = true;
    if (depth_ == 1 || (resp_depth_ && depth_ == resp_depth_)) {
      st_ = St::kKey;
      key_len_ = resp_len_ = msg_len_ = 0;
    }
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    if (depth_ > 0) --depth_;
    if (depth_ < resp_depth_) resp_depth_ = 0, in_message_ = false;  // the object ended
  }
}

void SseUsageFilter::reset() { *this = SseUsageFilter(); }

void SseUsageFilter::emit(std::string_view ev, std::string& out) {
  if (ev.find("\"choices\":[]") != std::string_view::npos &&
      ev.find("\"usage\":{") != std::string_view::npos) {
    ++dropped_;  // the usage chunk the client did not ask for
    return;
  }
  // include_usage adds "usage":null to every other chunk: removed (as a member, either side).
  for (;;) {
    const size_t at = ev.find("\"usage\"");
    if (at == std::string_view::npos) break;
    size_t to = at + 7;
    auto skipSpace = [&] {
      while (to < ev.size() && (ev[to] == ' ' || ev[to] == '\t')) ++to;
    };
    skipSpace();
    bool null_member = to < ev.size() && ev[to] == ':';
    if (null_member) {
      ++to;
      skipSpace();
      null_member = ev.substr(to, 4) == "null";
      to += 4;
    }
    if (!null_member) {  // another use of the word: keep it
      out.append(ev.substr(0, at + 7));
      ev.remove_prefix(at + 7);
      continue;
    }
    size_t from = at;
    while (from > 0 && (ev[from - 1] == ' ' || ev[from - 1] == '\t')) --from;
    if (from > 0 && ev[from - 1] == ',') {
      --from;
    } else {
      skipSpace();
      if (to < ev.size() && ev[to] == ',') {
        ++to;
        skipSpace();
      }
    }
    out.append(ev.substr(0, from));
    ev.remove_prefix(to);
  }
  out.append(ev);
}

void SseUsageFilter::feed(std::string_view in, std::string& out) {
  while (!in.empty()) {
    if (passthrough_) {
      // Forward up to the end of the oversized event (a blank line).
      size_t i = 0;
      for (; i < in.size(); ++i) {
        const char c = in[i];
        const bool end = c == '\n' && (last_[2] == '\n' || (last_[2] == '\r' && last_[1] == '\n'));
        last_[0] = last_[1], last_[1] = last_[2], last_[2] = c;
        if (end) {
          ++i;
          passthrough_ = false;
          break;
        }
      }
      out.append(in.substr(0, i));
      in.remove_prefix(i);
      continue;
    }
    const size_t before = pending_.size();
    pending_.append(in);
    in = {};
    size_t start = 0;
    for (size_t scan = before >= 3 ? before - 3 : 0;;) {
      const size_t a = pending_.find("\n\n", scan);
      const size_t b = pending_.find("\r\n\r\n", scan);
      size_t cr = pending_.find("\r\r", scan);
      if (cr != std::string::npos && cr + 2 < pending_.size() && pending_[cr + 2] == '\n')
        cr = std::string::npos;  // ("\r\r\n" is not a CR CR end: CRLF may follow)
      size_t end = std::min({a == std::string::npos ? a : a + 2, b == std::string::npos ? b : b + 4,
                             cr == std::string::npos ? cr : cr + 2});
      if (end == std::string::npos) break;
      emit(std::string_view(pending_).substr(start, end - start), out);
      start = scan = end;
    }
    pending_.erase(0, start);
    if (pending_.size() > kMaxEvent) {
      out.append(pending_);
      const size_t n = pending_.size();
      last_[0] = n >= 3 ? pending_[n - 3] : 0;
      last_[1] = n >= 2 ? pending_[n - 2] : 0;
      last_[2] = pending_[n - 1];
      pending_.clear();
      passthrough_ = true;
    }
  }
}

void SseUsageFilter::finish(std::string& out) {
  out.append(pending_);
  pending_.clear();
}

}  // namespace kvgate::governance
