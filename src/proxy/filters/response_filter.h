// Response filters: what reads, and may rewrite, an engine's answer while the relay forwards it
// (internal to src/proxy; the response phase of an Exchange, relay.cc). Each filter is one file
// under src/proxy/filters/ plus its line in responseFilters() (response_registry.cc), in the
// order they run. At the answer's head each says whether it runs on this answer (begin); the relay
// then hands every running filter each piece of the payload as it relays it, with chunk framing
// removed (payload; false: it needs no more of this answer and is dropped), and, when the answer
// was relayed whole to a client still there, end() to the filters still running. At most one
// running filter rewrites what the client gets (rewrites(): its payload() writes the replacement
// piece into `out`, finish() the tail, and it is never dropped); the relay frames that for the
// client's protocol. Once no filter runs, the relay stops decoding a chunked payload for them,
// and a sockMapMode rule's body may go to the kernel (relay_sockmap.cc). A filter keeps its
// per-request state in the request's RequestCtx (request_ctx.h): the filters themselves are
// stateless singletons.
//
// The chain, in order: usage (the engine's usage for quota settlement and a sampled trace),
// usage_strip (the usage the gateway asked for on the client's behalf removed from an event
// stream), tokenize_check (a forwarded /tokenize or /detokenize answer checked against the
// gateway's own, tokenize_local.h), response_id (a Responses API answer's id remembered with the
// endpoint that answered, response_homes.h).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "http/parser.h"
#include "proxy/request_ctx.h"
#include "proxy/route_table.h"

namespace kvgate::proxy {

// What a response filter sees of the answer being relayed.
struct ResponseEnv {
  RequestCtx& rq;
  const Route& route;
  // The engine's head: its text fields (get(), headers, reason) only in begin(); after it, only
  // its scalars (status, event_stream, body_kind): the head's bytes are consumed then.
  const http::ResponseHead& rh;
  bool head_request;  // the client asked with HEAD: no body is relayed
};

class ResponseFilter {
 public:
  virtual const char* name() const = 0;
  // Runs on this answer (the relay then decodes a chunked payload for it).
  virtual bool begin(const ResponseEnv& e) const = 0;
  // One piece of the payload (empty when a read held only chunk framing). `out` (the rewriting
  // filter only): the piece the client gets instead, unframed. False: no more pieces are needed
  // (ignored for the rewriter).
  virtual bool payload(const ResponseEnv& e, std::string_view piece, std::string* out) const = 0;
  // The answer was relayed whole and the client is still there (a filter still running).
  virtual void end(const ResponseEnv&) const {}
  virtual bool rewrites() const { return false; }
  // (the rewriting filter) What it still holds, after the last piece, into `out`.
  virtual void finish(const ResponseEnv&, std::string& /*out*/) const {}

 protected:
  ~ResponseFilter() = default;
};

// The chain, in order (response_registry.cc); at most this many filters.
constexpr size_t kMaxResponseFilters = 8;
const std::vector<const ResponseFilter*>& responseFilters();

// The filters' own singletons (one file each).
const ResponseFilter& usageScanFilter();
const ResponseFilter& usageStripFilter();
const ResponseFilter& tokenizeCheckFilter();
const ResponseFilter& responseIdFilter();

// The engine answered a checked /tokenize or /detokenize with `status` (and, on 200, its whole
// answer in rq.tok_capture): compared with what the gateway computed; a mismatch stops the
// gateway's answers for that model (tokenize_check.cc).
void finishTokenizeCheck(RequestCtx& rq, const Route& route, int status);

}  // namespace kvgate::proxy
