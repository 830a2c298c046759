// Asks a `kvgate index` (LookupRoute over gRPC) for a request's chain, for a kv_exact stage whose
// rule names kvIndexAddr, without blocking the worker's event loop: gRPC's callback API runs the
// call, its completion is posted back to the worker. The call carries a deadline of
// kvIndexTimeoutMs (default 5 ms); a late or failed answer marks the hint failed (the stage then
// falls through with remote_timeout or remote_error). One channel per index address, shared by
// every worker (gRPC channels are thread-safe and reconnect by themselves).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "http/asio.h"
#include "routing/request_context.h"

namespace kvgate::proxy {

struct RemoteIndexCall {
  std::string addr;    // HOST:PORT
  std::chrono::milliseconds timeout{5};
  std::string model, tenant;
  uint32_t block_size = 16;
};

// gRPC calls whose completion has not yet been posted back (the data plane waits for 0 before it
// stops its workers' loops, so no callback posts into a destroyed io_context).
size_t remoteCallsInFlight();

asio::awaitable<void> askRemoteIndex(asio::io_context& io, const RemoteIndexCall& call,
                                     const std::vector<uint64_t>& chain, routing::RemoteHint& out);

}  // namespace kvgate::proxy
