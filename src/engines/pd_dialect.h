// The request bodies of prefill/decode disaggregation, per engine dialect: bytes in, bytes out,
// no I/O (shared/reference/engines.md §3.3, §4, §5.3).
//
// Every body is rewritten at its top level only: members the dialect replaces are dropped
// (compared after unescaping, so "stre\u0061m" is "stream"), every other member is copied byte
// for byte, and the dialect's members are appended last (JSON parsers that take the last of
// duplicate keys, as Python's and JavaScript's do, then see ours). Objects the engine returns
// (vLLM's kv_transfer_params, TensorRT-LLM's disaggregated_params) are passed on as the raw
// bytes the engine sent: opaque.
//
//   vLLM (NIXL), sequential: prefill leg = client body with stream false, max_tokens 1 (and
//     max_completion_tokens 1 when the client sent it), stream_options, min_tokens and
//     min_completion_tokens removed, and kv_transfer_params asking for a remote decode; decode
//     leg = the client's body plus the kv_transfer_params the prefill answer carried (none when
//     it carried none or null).
//   SGLang, concurrent: both legs = client body plus bootstrap_host, bootstrap_port and
//     bootstrap_room.
//   TensorRT-LLM, sequential: context leg = client body with disaggregated_params
//     {request_type: context_only, disagg_request_id}, stream false, stream_options null;
//     generation leg = client body with the returned choices[0].disaggregated_params, its
//     request_type set to generation_only. A context answer whose choices[0].finish_reason is
//     neither "length" nor "not_finished" is final (no generation leg).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace kvgate::engines::pd {

enum class Dialect : uint8_t { kVllm, kSglang, kTrtllm };
// "vllm" | "sglang" | "trtllm"; nullopt for anything else (llamacpp has no P/D).
std::optional<Dialect> dialectFromName(std::string_view name);
const char* dialectName(Dialect d);

// Largest prefill / context answer the gateway reads (the answer of a one-token request).
constexpr size_t kMaxLegAnswerBytes = 4 * 1024 * 1024;

// vLLM prefill leg. Errors: the body is not a JSON object.
Result<std::string> vllmPrefillBody(std::string_view client_body);
// The raw kv_transfer_params object of a vLLM prefill answer; nullopt when it is absent or null.
// Errors: the answer is not a JSON object, or kv_transfer_params is neither an object nor null.
Result<std::optional<std::string>> vllmTransferParams(std::string_view prefill_answer);
// vLLM decode leg: the client's body plus `params` (raw JSON object), when there are any.
Result<std::string> vllmDecodeBody(std::string_view client_body,
                                   const std::optional<std::string>& params);

// SGLang: the body both legs receive. `host` is the prefill endpoint's address (IPv6 without
// brackets: they are added here); port 0 is sent as null (the server's default).
Result<std::string> sglangBody(std::string_view client_body, std::string_view host, uint16_t port,
                               uint64_t room);

// TensorRT-LLM context leg.
Result<std::string> trtllmContextBody(std::string_view client_body, uint64_t disagg_request_id);
struct ContextAnswer {
  bool finished = false;  // finish_reason says generation is over: return this answer
  std::string params;     // raw choices[0].disaggregated_params (when not finished)
};
// Errors: not a JSON object, no choices[0], or an unfinished answer without an object
// disaggregated_params.
Result<ContextAnswer> trtllmContextAnswer(std::string_view context_answer);
// A finished context answer as the client gets it: choices[0].disaggregated_params (the engines'
// state) removed; for a client that asked to stream, one SSE event with that object and
// `data: [DONE]`. Errors: as trtllmContextAnswer.
Result<std::string> trtllmFinalAnswer(std::string_view context_answer, bool stream);
// TensorRT-LLM generation leg: `params` with request_type generation_only.
Result<std::string> trtllmGenerationBody(std::string_view client_body, std::string_view params);

// The X-Request-Id both legs of a P/D request carry (upstream's form, which vLLM's P2P
// connectors parse): ___prefill_addr_<p>___decode_addr_<d>_<id>, each address "ip:port" of the
// endpoint's KV-transfer (nixl) port, IPv6 in brackets.
std::string pdRequestId(std::string_view prefill_addr, std::string_view decode_addr,
                        std::string_view id);

}  // namespace kvgate::engines::pd
