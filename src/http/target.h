// Request-target normalization: the path the gateway matches rules on is the path the engine
// serves.
//
// Engines behind the gateway (uvicorn/Starlette for vLLM, SGLang and TensorRT-LLM; cpp-httplib for
// llama.cpp) percent-decode the path before routing it, so a raw comparison lets
// `/v1/%63hat/completions` miss a `path_prefix: /v1/chat` rule (and its credentials) and land on a
// broader one while the engine serves chat. Like Envoy's `normalize_path` + `merge_slashes` with
// escaped slashes rejected, the gateway rewrites the target before matching and forwards the
// rewritten target, so both sides read one path:
//   1. only origin-form targets (starting with '/') are served; absolute-form and '*' are refused;
//   2. percent-encoded unreserved characters (ALPHA DIGIT - . _ ~) are decoded; other escapes are
//      kept, with upper-case hex digits;
//   3. runs of '/' are merged into one;
//   4. dot segments ("." and "..") are removed as RFC 3986 §5.2.4 says (".." never climbs above
//      the root);
//   5. refused, because no rewrite keeps both readings equal: a fragment ('#': engines' URL
//      parsers drop it, so "/v1/chat/completions#x" would miss an exact rule and still be served
//      as chat), a malformed escape ('%' not followed
//      by two hex digits), an encoded '/' or '\' (%2F, %5C: the engine would decode them into
//      separators the gateway did not match on), an encoded control byte (%00-%1F, %7F).
// The rules are then matched against the fully decoded path (what the engine's router compares).
// The query string is forwarded as it came.
#pragma once
#include <string>
#include <string_view>

namespace kvgate::http {

struct NormalizedTarget {
  std::string forward;  // the target to send upstream (path, then '?' and the query as given)
  std::string match;    // the fully decoded path the rules are matched against
};

// True when `target` is already canonical and its path is what rules match: nothing to rewrite
// (the common case; no allocation). Otherwise call normalizeTarget.
bool isCanonicalTarget(std::string_view target);

// Normalizes `target` into `out`. Returns an empty string on success, else why it was refused
// (the text of a 400 bad_path answer).
std::string normalizeTarget(std::string_view target, NormalizedTarget& out);

}  // namespace kvgate::http
