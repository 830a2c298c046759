// TensorRT-LLM's P/D dialect (sequential): the context leg is the client's body as a
// context_only request with a fresh disagg request id; its answer's
// choices[0].disaggregated_params go into the generation leg (generation_only). A context answer
// whose finish_reason says generation is over is the answer itself (its engine state removed; one
// SSE event and [DONE] for a client that asked to stream).
#include "proxy/pd/dialect.h"

namespace kvgate::proxy {
namespace {

class TrtllmDialect final : public PdDialect {
 public:
  engines::pd::Dialect id() const override { return engines::pd::Dialect::kTrtllm; }
  bool concurrent() const override { return false; }
  Result<std::string> firstBody(std::string_view client_body,
                                const PdLegSite& site) const override {
    return engines::pd::trtllmContextBody(client_body, site.room);
  }
  PdAfterFirst afterFirst(std::string_view client_body, std::string_view answer,
                          bool stream) const override {
    PdAfterFirst out;
    auto ctx = engines::pd::trtllmContextAnswer(answer);
    if (ctx && ctx->finished) {
      auto final = engines::pd::trtllmFinalAnswer(answer, stream);
      if (final) {
        out.kind = PdAfterFirst::Kind::kFinalAnswer;
        out.body = std::move(*final);
        out.content_type = stream ? "text/event-stream" : "application/json";
        return out;
      }
      out.error = final.error().what;
      return out;
    }
    if (!ctx) {
      out.error = ctx.error().what;
      return out;
    }
    auto body = engines::pd::trtllmGenerationBody(client_body, ctx->params);
    if (!body) {
      out.error = body.error().what;
      return out;
    }
    out.kind = PdAfterFirst::Kind::kSecondLeg;
    out.body = std::move(*body);
    return out;
  }
};

}  // namespace

const PdDialect& trtllmPdDialect() {
  static const TrtllmDialect d;
  return d;
}

}  // namespace kvgate::proxy
