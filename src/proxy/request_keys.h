// The routing keys of one request (routing::RequestContext), computed only for the selector that
// reads them: the prefix key and conversation id (sel 8, 9, 10), the persist session value
// (sel 3: a header, cookie:NAME, query:NAME or basic-auth) and the client's source address.
#pragma once
#include <cstdint>
#include <string_view>

#include "http/parser.h"
#include "proxy/route_table.h"
#include "routing/prefix_key.h"
#include "routing/request_context.h"

namespace kvgate::proxy {

// `parsed`: the body's keys when the caller already parsed it (to find the model), else null.
routing::RequestContext requestContext(const http::RequestHead& head, std::string_view body,
                                       const Route& route, uint64_t source_key, size_t prefix_bytes,
                                       const routing::BodyKeys* parsed);

// The value of `key` in a `sep`-separated list of key=value items (cookies, query strings),
// items trimmed of leading spaces; empty when absent.
std::string_view listParam(std::string_view list, char sep, std::string_view key);

}  // namespace kvgate::proxy
