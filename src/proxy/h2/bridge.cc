// The HTTP/2 <-> request path bridge (bridge.h says the rules).
#include "proxy/h2/bridge.h"

#include "http/parser.h"
#include "http/server.h"

namespace kvgate::proxy::h2 {

void RequestHeadBuilder::fail(int status, std::string why) {
  if (status_ != 0) return;
  status_ = status;
  error_ = std::move(why);
}

void RequestHeadBuilder::add(std::string_view name, std::string_view value) {
  if (status_ != 0) return;
  bytes_ += name.size() + value.size() + 4;  // as the HTTP/1.1 line ("name: value\r\n")
  if (bytes_ > max_bytes_) return fail(431, "request header fields too large");
  if (!name.empty() && name[0] == ':') {
    if (name == ":method")
      method_.assign(value);
    else if (name == ":path")
      path_.assign(value);
    else if (name == ":authority")
      authority_.assign(value);
    // (:scheme: the listener knows whether it is TLS; :protocol is not enabled)
    return;
  }
  if (name == "cookie") {  // RFC 9113 §8.2.3: crumbs joined for an HTTP/1.1 reader
    if (!cookie_.empty()) cookie_ += "; ";
    cookie_.append(value);
    return;
  }
  if (name == "content-length") return;  // replaced by the real length
  if (name == "expect" || name == "te") return;
  if (name == "host") {
    if (has_host_) return fail(400, "more than one host field");
    has_host_ = true;
    host_.assign(value);
  }
  fields_.append(name).append(": ").append(value).append("\r\n");
}

bool RequestHeadBuilder::finish(size_t body_len, std::string& out) {
  if (status_ == 0 && method_ == "CONNECT") fail(501, "CONNECT is not served");
  if (status_ == 0 && (method_.empty() || path_.empty())) fail(400, "missing :method or :path");
  if (status_ == 0 && has_host_ && !authority_.empty() && host_ != authority_)
    fail(400, "host field differs from :authority");
  if (status_ == 0 && !has_host_ && authority_.empty()) fail(400, "missing :authority");
  if (status_ != 0) return false;
  out.clear();
  out.reserve(fields_.size() + path_.size() + authority_.size() + cookie_.size() + 64);
  out.append(method_).append(" ").append(path_).append(" HTTP/1.1\r\n");
  if (!has_host_) out.append("host: ").append(authority_).append("\r\n");
  out.append(fields_);
  if (!cookie_.empty()) out.append("cookie: ").append(cookie_).append("\r\n");
  if (body_len > 0 ||
      (method_ != "GET" && method_ != "HEAD" && method_ != "DELETE" && method_ != "OPTIONS"))
    out.append("content-length: ").append(std::to_string(body_len)).append("\r\n");
  out.append("\r\n");
  if (out.size() > max_bytes_) {
    fail(431, "request header fields too large");
    return false;
  }
  return true;
}

// The head text is the request path's own (buildUpstreamHead: a request line, then "Name: value"
// lines of fields the strict parser already accepted), so it is split here rather than parsed
// again: no field-count limit beyond the client's (a request of 100 fields plus X-Request-Id
// still goes out).
bool requestFields(std::string_view head, std::string_view scheme, std::vector<Field>& fields,
                   std::string& error) {
  fields.clear();
  auto bad = [&](const char* why) {
    error = std::string("request head not readable for HTTP/2: ") + why;
    return false;
  };
  size_t eol = head.find("\r\n");
  if (eol == std::string_view::npos) return bad("no request line");
  const std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string_view::npos || sp2 <= sp1 + 1) return bad("request line");
  const std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view authority;
  // Absolute form (RFC 9112 §3.2.2): the authority and path come from the URI (RFC 9113 §8.3.1).
  for (std::string_view pre : {"http://", "https://"}) {
    if (target.size() >= pre.size() && http::iequals(target.substr(0, pre.size()), pre)) {
      target.remove_prefix(pre.size());
      const size_t slash = target.find_first_of("/?");
      authority = target.substr(0, slash);
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
      break;
    }
  }
  std::vector<std::pair<std::string_view, std::string_view>> lines;
  std::string_view conn_tokens;
  for (size_t at = eol + 2; at < head.size();) {
    eol = head.find("\r\n", at);
    if (eol == std::string_view::npos) return bad("unterminated field");
    if (eol == at) break;  // the empty line
    const std::string_view l = head.substr(at, eol - at);
    at = eol + 2;
    const size_t colon = l.find(':');
    if (colon == std::string_view::npos || colon == 0) return bad("field without a name");
    std::string_view value = l.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    const std::string_view name = l.substr(0, colon);
    if (http::iequals(name, "host") && authority.empty()) authority = value;
    if (http::iequals(name, "connection")) conn_tokens = value;
    lines.emplace_back(name, value);
  }
  if (authority.empty()) return bad("no Host (HTTP/2 needs :authority)");
  if (method.empty() || target.empty()) return bad("request line");
  fields.push_back({":method", std::string(method)});
  fields.push_back({":scheme", std::string(scheme)});
  fields.push_back({":authority", std::string(authority)});
  fields.push_back({":path", std::string(target)});
  for (const auto& [name, value] : lines) {
    if (http::isHopByHop(name) || http::iequals(name, "host") ||
        http::iequals(name, "proxy-connection") || http::iequals(name, "expect") ||
        (!conn_tokens.empty() && http::headerHasToken(conn_tokens, name)))
      continue;
    Field f{std::string(name), std::string(value)};
    for (char& c : f.name)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    fields.push_back(std::move(f));
  }
  return true;
}

bool decodeHttp2Settings(std::string_view value, std::string& out) {
  out.clear();
  if (value.size() % 4 == 1 || value.size() > 256) return false;  // (32 entries: 256 characters)
  uint32_t acc = 0;
  int bits = 0;
  for (char c : value) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '-')
      v = 62;
    else if (c == '_')
      v = 63;
    else
      return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if ((acc & ((1u << bits) - 1)) != 0) return false;  // (stray bits past the last byte)
  if (out.size() % 6 != 0) return false;
  // Values libnghttp2 would take as a connection error after the 101 (RFC 9113 §6.5.2, RFC 8441,
  // RFC 9218): refused here, so the request is served as HTTP/1.1 instead.
  int no_priorities = -1;  // SETTINGS_NO_RFC7540_PRIORITIES: may not change once given
  for (size_t i = 0; i < out.size(); i += 6) {
    const auto b = [&](size_t k) {
      return static_cast<uint32_t>(static_cast<uint8_t>(out[i + k]));
    };
    const uint32_t id = b(0) << 8 | b(1);
    const uint32_t v = b(2) << 24 | b(3) << 16 | b(4) << 8 | b(5);
    if ((id == 0x2 || id == 0x8 || id == 0x9) && v > 1) return false;  // push, connect, priorities
    if (id == 0x4 && v > 0x7fffffffu) return false;                    // INITIAL_WINDOW_SIZE
    if (id == 0x5 && (v < (1u << 14) || v > (1u << 24) - 1)) return false;  // MAX_FRAME_SIZE
    if (id == 0x9) {
      if (no_priorities >= 0 && static_cast<uint32_t>(no_priorities) != v) return false;
      no_priorities = static_cast<int>(v);
    }
  }
  return true;
}

bool sensitiveField(std::string_view lower_name) {
  return lower_name == "authorization" || lower_name == "proxy-authorization" ||
         lower_name == "cookie" || lower_name == "x-api-key";
}

void ResponseHeadText::add(std::string_view name, std::string_view value) {
  if (too_large_) return;
  if (fields_.size() + name.size() + value.size() + 4 > max_bytes_) {
    too_large_ = true;
    return;
  }
  if (name == ":status") {
    int s = 0;
    for (char c : value) s = s * 10 + (c - '0');  // (libnghttp2 checked: three digits)
    status_ = value.size() == 3 ? s : 0;
    return;
  }
  if (!name.empty() && name[0] == ':') return;
  if (name == "content-length") has_length_ = true;
  fields_.append(name).append(": ").append(value).append("\r\n");
}

bool ResponseHeadText::finish(std::string_view request_method, std::string& out) {
  if (too_large_ || status_ < 100) return false;
  out.append("HTTP/1.1 ")
      .append(std::to_string(status_))
      .append(" ")
      .append(http::statusReason(status_))
      .append("\r\n")
      .append(fields_);
  const bool bodyless = interim() || status_ == 204 || status_ == 304 || request_method == "HEAD";
  chunked_ = !bodyless && !has_length_;
  if (chunked_) out.append("transfer-encoding: chunked\r\n");
  out.append("\r\n");
  return true;
}

void ResponseHeadText::clear() {
  status_ = 0;
  has_length_ = too_large_ = chunked_ = false;
  fields_.clear();
}

}  // namespace kvgate::proxy::h2
