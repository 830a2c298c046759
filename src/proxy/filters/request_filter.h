// Request filters: the gates a request passes once its rule is known and before it is routed
// (internal to src/proxy). Each filter is one file under src/proxy/filters/ plus its line in
// requestFilters() (registry.cc), which builds a rule's chain when the rule is committed. A
// filter reads the request and its state (request_ctx.h) and the services it was given (the
// governance registries, the tokenizer, the data plane's clock): no process-wide lookups. It
// admits (Verdict::ok) or names the error the connection answers; the connection answers it in
// its protocol, marks the request denied, and the next filters do not run.
//
// The chain, in order: credentials (api_key_auth required / jwt / apikey-or-jwt: the key or
// token, then the model against the key's allowed models), quota (the request's buckets reserve
// its tokens; settled when the request ends, quota.h). P/D admission (proxy/admission.h) runs in
// the P/D forwarder: it waits for a prefill slot, which only exists once an endpoint is picked.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "http/asio.h"
#include "proxy/data_plane.h"
#include "proxy/filters/filter_chain.h"
#include "proxy/request_ctx.h"

namespace kvgate::governance {
struct Services;
}
namespace kvgate::routing {
class PromptTokens;
}

namespace kvgate::proxy {

// A filter's answer: status 0 admits; else the error to answer (OpenAI-shaped), with a
// Retry-After when retry_after_s > 0.
// (code and param name static strings: a Verdict held across a suspension stays small)
struct Verdict {
  int status = 0;
  std::string_view code, param;
  std::string message;
  int64_t retry_after_s = 0;
  bool ok() const { return status == 0; }
  static Verdict refused(int status, const char* code, std::string message) {
    Verdict v;
    v.status = status;
    v.code = code;
    v.message = std::move(message);
    return v;
  }
};

// What a filter sees of one request.
struct FilterEnv {
  const Request& req;
  RequestCtx& rq;
  const Route& route;
  std::string_view model;  // the model the checks use: the body's as the engine reads it
  bool metered = false;    // a quota may apply (credentials checked, or shared-VIP limits exist)
  const governance::Services& gov;
  const ProxyOptions& opts;
  const routing::PromptTokens* prompt_tokens;  // null: no --models-dir
  DataPlaneStats& stats;
  int64_t now_ns;  // the data plane's clock
};

// The chain of a rule, built when the rule is committed (registry.cc).
std::vector<RequestFilter> requestFilters(const config::RuleSpec& rule);

}  // namespace kvgate::proxy
