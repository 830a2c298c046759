// The HTTP/2 <-> request path bridge (bridge.h says the rules).
#include "proxy/h2/bridge.h"

#include "http/parser.h"

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

bool responseFields(std::string_view head, std::string_view request_method, int& status,
                    std::vector<Field>& fields) {
  http::ResponseHead rh;
  http::ParseError err;
  const int n =
      http::parseResponseHead(head.data(), head.size(), head.size() + 1, request_method, rh, err);
  if (n <= 0) return false;
  status = rh.status;
  fields.clear();
  for (size_t i = 0; i < rh.num_headers; ++i) {
    const auto& h = rh.headers[i];
    if (http::isHopByHop(h.name) || http::iequals(h.name, "proxy-connection")) continue;
    Field f{std::string(h.name), std::string(h.value)};
    for (char& c : f.name)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    fields.push_back(std::move(f));
  }
  return true;
}

}  // namespace kvgate::proxy::h2
