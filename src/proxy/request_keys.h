// The routing keys of one request (routing::RequestContext), computed only for the facts the
// rule's pipeline declares it needs: the prefix key and conversation id (chwbl, gpuaware,
// wrr_hash), the persist session value (a header, cookie:NAME, query:NAME or basic-auth) and
// the client's source address.
#pragma once
#include <cstdint>
#include <string_view>

#include "http/parser.h"
#include "proxy/route_table.h"
#include "routing/request_context.h"

namespace kvgate::proxy {

routing::RequestContext requestContext(const http::RequestHead& head,
                                       const routing::RequestFacts* facts, const Route& route,
                                       uint64_t source_key);

// The value of `key` in a `sep`-separated list of key=value items (cookies, query strings),
// items trimmed of leading spaces; empty when absent.
std::string_view listParam(std::string_view list, char sep, std::string_view key);

}  // namespace kvgate::proxy
