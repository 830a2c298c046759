// The CHWBL prefix key (`chwbl_key`): XXH3-64 over model, 0x00, cache_salt, 0x00 and the first K
// bytes of the rendered prompt (RequestFacts::prompt_prefix; the rendering is described there
// and done by proxy/facts_parser.cc).
//
// K trades affinity against herding: a small K keys only the shared system prompt, so every
// conversation behind one preamble lands on one endpoint (maximal cache reuse of the preamble,
// but the bounded load must spill the excess); a large K separates conversations earlier,
// spreading load but losing reuse of shared preambles shorter than K. Default K = 1024 bytes
// (`serve --prefix-key-bytes`). Requests differing in model or cache_salt never share a key.
#pragma once
#include <cstdint>
#include <optional>

#include "routing/request_facts.h"

namespace kvgate::routing {

// The prefix key of a parsed request; empty when the body had no usable prompt.
std::optional<uint64_t> prefixKey(const RequestFacts& facts);

}  // namespace kvgate::routing
