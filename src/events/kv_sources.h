// Which KV-event publishers the gateway follows, derived from the rule set.
//
// A rule with kvExactMode 3 (single pool: every endpoint) or 1 (P/D: the prefill endpoints,
// ep_role 1) names one publisher per endpoint at endpointIP:kvZmqPort (default 5557), with
// kvDpRankCount ranks (default 1); kvEngineType vllm and sglang over ZMQ, trtllm drained over HTTP
// on the endpoint's serving port (the publisher key is then endpointIP:targetPort); llamacpp
// publishes none.
// refused (400). The inventory is keyed by that address and shared by every
// rule naming it; two rules that name one address with a different kvEngineType, kvBlockSize,
// kvDpRankCount or kvReplayPort conflict (400, naming both rules), since one inventory cannot be
// two things. kvReplayPort (0 = none) must not overlap the event ports nor run past 65535.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "common/result.h"
#include "config/rule.h"
#include "events/event_plane.h"

namespace kvgate::events {

// TensorRT-LLM engines of a security 2 rule are drained over TLS with the rule's mtls_backend
// fields; two rules naming one engine must agree on them (400). `tls_of` (may be empty: a check
// before the data plane has a plan) gives a rule's client context.
using BackendTlsOf = std::function<std::shared_ptr<http::TlsFiles>(const config::RuleSpec&)>;
Result<std::vector<SourceSpec>> kvSources(const std::vector<config::RuleSpec>& rules,
                                          const BackendTlsOf& tls_of = {});

// The publisher key ("host:port") of endpoint `ep_idx` of a kvExactMode rule, as the event plane
// names its source: endpointIP:kvZmqPort, or endpointIP:targetPort for TensorRT-LLM's drain; ""
// when the rule follows no events for that endpoint (mode 0, a P/D decode endpoint, llamacpp).
std::string publisherKey(const config::RuleSpec& rule, size_t ep_idx);

// kvHashAlgo, else the engine's own algorithm (vllm sha256_cbor, sglang sha256_sglang, trtllm
// blockhash_trtllm), as upstream derives it.
std::string hashAlgoOf(const config::RuleSpec& rule);

}  // namespace kvgate::events
