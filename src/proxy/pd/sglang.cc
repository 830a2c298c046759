// SGLang's P/D dialect (concurrent): both legs get the same body, the client's plus
// bootstrap_host (the prefill endpoint's address), bootstrap_port (pdBootstrapPort; 0 -> null,
// the server's default) and a fresh bootstrap_room; the forwarder sends them at once, relays the
// decode answer and drains the prefill answer in the background.
#include "proxy/pd/dialect.h"

namespace kvgate::proxy {
namespace {

class SglangDialect final : public PdDialect {
 public:
  engines::pd::Dialect id() const override { return engines::pd::Dialect::kSglang; }
  bool concurrent() const override { return true; }
  Result<std::string> firstBody(std::string_view client_body,
                                const PdLegSite& site) const override {
    return engines::pd::sglangBody(client_body, site.prefill_ip, site.bootstrap_port, site.room);
  }
  PdAfterFirst afterFirst(std::string_view, std::string_view, bool) const override {
    PdAfterFirst out;
    out.error = "SGLang's legs run at once: there is no first answer";
    return out;
  }
};

}  // namespace

const PdDialect& sglangPdDialect() {
  static const SglangDialect d;
  return d;
}

}  // namespace kvgate::proxy
