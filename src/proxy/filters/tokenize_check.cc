// Response filter `tokenize_check` (response_filter.h): a /tokenize or /detokenize call the
// gateway could have answered itself was forwarded so that the engine's answer checks the
// gateway's (tokenize_local.h). The engine's whole JSON answer (uncompressed, bounded: an answer
// much bigger than the gateway's is not checked) is compared when it ended; a refusal the gateway
// would not have made (tokenizeRefusal) counts as a mismatch at once; any other answer checks
// nothing. A mismatch stops the gateway's own answers for that model. State:
// RequestCtx::tok_check, tok_capture.
#include "common/log.h"
#include "proxy/filters/response_filter.h"
#include "proxy/rule_stats.h"
#include "proxy/tokenize_local.h"

namespace kvgate::proxy {
namespace {

class TokenizeCheck final : public ResponseFilter {
 public:
  const char* name() const override { return "tokenize_check"; }
  bool begin(const ResponseEnv& e) const override {
    RequestCtx& rq = e.rq;
    if (!rq.tok_check) return false;
    // (an encoded answer is not read: it is the client's)
    const std::string_view enc = e.rh.get("content-encoding");
    if (e.rh.status == 200 && !e.head_request && !e.rh.event_stream &&
        e.rh.body_kind != http::BodyKind::kNone && (enc.empty() || http::iequals(enc, "identity")))
      return true;
    // The engine refused what the gateway would have answered: a mismatch of that form.
    if (tokenizeRefusal(e.rh.status)) finishTokenizeCheck(rq, e.route, e.rh.status);
    rq.tok_check.reset();
    return false;
  }
  bool payload(const ResponseEnv& e, std::string_view piece, std::string*) const override {
    RequestCtx& rq = e.rq;
    if (!rq.tok_check) return false;
    if (rq.tok_capture.size() + piece.size() > rq.tok_check->answer_bytes) {
      rq.tok_check.reset();  // (an answer this much bigger than ours is not checked)
      std::string().swap(rq.tok_capture);
      return false;
    }
    rq.tok_capture.append(piece);
    return true;
  }
  void end(const ResponseEnv& e) const override {
    if (e.rq.tok_check) finishTokenizeCheck(e.rq, e.route, e.rh.status);
  }
};

}  // namespace

const ResponseFilter& tokenizeCheckFilter() {
  static const TokenizeCheck f;
  return f;
}

void finishTokenizeCheck(RequestCtx& rq, const Route& route, int status) {
  auto check = std::move(rq.tok_check);
  std::string body;
  body.swap(rq.tok_capture);
  TokenizeMirror* mirror = route.tokenize_mirror.get();
  if (!mirror) return;
  const size_t api = check->op == TokenizeOp::kDetokenize;
  if (status != 200) {
    mirror->refused(*check);
  } else if (mirror->check(*check, body)) {
    route.stats->tokenize_events[api][1].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  route.stats->tokenize_events[api][2].fetch_add(1, std::memory_order_relaxed);
  log::warn("proxy", std::string(api ? "/detokenize" : "/tokenize") + " of model '" + check->model +
                         "' on rule " +
                         (route.rule.name.empty() ? route.rule.key() : route.rule.name) + ": " +
                         (rq.outcome.endpoint ? *rq.outcome.endpoint : std::string("?")) +
                         " answered " + std::to_string(status) +
                         (status == 200 ? " differently from the gateway's tokenizer"
                                        : " where the gateway would have answered") +
                         "; the gateway forwards calls of this form from now on");
}

}  // namespace kvgate::proxy
