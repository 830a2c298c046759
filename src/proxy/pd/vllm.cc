// vLLM's P/D dialect (sequential): the prefill leg is the client's body, not streamed, with
// max_tokens 1 and kv_transfer_params asking for a remote decode (engines/pd_dialect.h
// vllmPrefillBody); its answer's kv_transfer_params go into the decode leg's body. A prefill answer without them is a push
// connector's (P2P NCCL: the KV went to the decode endpoint the request id names), so a decode
// endpoint that cannot be reached means the prefill is redone for the next one.
#include "proxy/pd/dialect.h"

namespace kvgate::proxy {
namespace {

class VllmDialect final : public PdDialect {
 public:
  engines::pd::Dialect id() const override { return engines::pd::Dialect::kVllm; }
  bool concurrent() const override { return false; }
  Result<std::string> firstBody(std::string_view client_body, const PdLegSite&) const override {
    return engines::pd::vllmPrefillBody(client_body);
  }
  PdAfterFirst afterFirst(std::string_view client_body, std::string_view answer,
                          bool) const override {
    PdAfterFirst out;
    auto params = engines::pd::vllmTransferParams(answer);
    if (!params) {
      out.error = params.error().what;
      return out;
    }
    auto body = engines::pd::vllmDecodeBody(client_body, *params);
    if (!body) {
      out.error = body.error().what;
      return out;
    }
    out.kind = PdAfterFirst::Kind::kSecondLeg;
    out.body = std::move(*body);
    out.kv_follows_id = !params->has_value();
    return out;
  }
};

}  // namespace

const PdDialect& vllmPdDialect() {
  static const VllmDialect d;
  return d;
}

}  // namespace kvgate::proxy
