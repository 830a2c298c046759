// A P/D dialect: how one engine family runs a prefill/decode request's two legs (internal to
// src/proxy). The P/D forwarder (pd_forward.cc) picks the pair, opens the legs, relays and
// rescues; what differs per engine is here, one file per engine plus its line in registry.cc:
//
// - concurrent() (SGLang): one body to both legs at once, the decode answer relayed, the prefill
//   answer drained in the background; else sequential (vLLM, TensorRT-LLM): the first leg is
//   answered in full before the second starts.
// - firstBody(): the first leg's body from the client's (the wire rules: engines/pd_dialect.h).
// - afterFirst() (sequential): what a 2xx first-leg answer means: the second leg's body (and
//   whether the KV follows the request id, a push connector), the final answer (a TensorRT-LLM
//   context that already finished), or an error (a 502 naming the prefill endpoint).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"
#include "engines/pd_dialect.h"

namespace kvgate::proxy {

// What a leg's body may name: the prefill endpoint's address and SGLang's bootstrap port, and a
// fresh random room / request id (63 bits) the dialect may use.
struct PdLegSite {
  std::string_view prefill_ip;
  uint16_t bootstrap_port = 0;
  uint64_t room = 0;
};

struct PdAfterFirst {
  enum class Kind { kSecondLeg, kFinalAnswer, kError } kind = Kind::kError;
  std::string body;          // kSecondLeg: the second leg's body; kFinalAnswer: the answer
  std::string content_type;  // kFinalAnswer
  std::string error;         // kError
  bool kv_follows_id = false;  // kSecondLeg: the KV went to the decode the request id names
};

class PdDialect {
 public:
  virtual ~PdDialect() = default;
  virtual engines::pd::Dialect id() const = 0;
  virtual bool concurrent() const = 0;
  virtual Result<std::string> firstBody(std::string_view client_body,
                                        const PdLegSite& site) const = 0;
  // (sequential dialects; a concurrent one is never asked)
  virtual PdAfterFirst afterFirst(std::string_view client_body, std::string_view answer,
                                  bool stream) const = 0;
};

// The dialect of a rule's kvEngineType (registry.cc).
const PdDialect& pdDialect(engines::pd::Dialect d);

}  // namespace kvgate::proxy
