// Identifiers: request ids (32 lowercase hex, as the upstream gateway injects) and UUIDv4 rule ids.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate {

// 32 lowercase hex characters from a per-thread generator (not cryptographic; unique enough).
void newRequestId(char out[32]);
std::string newRequestId();
std::string newUuidV4();
// True when `s` is usable as a request id passed through from a client: 1..128 visible ASCII.
bool isAcceptableRequestId(std::string_view s);
// `v` as 16 lowercase hex characters, most significant first (no terminator).
void hex64(uint64_t v, char out[16]);

}  // namespace kvgate
