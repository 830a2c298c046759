// Endpoint live state shared by every snapshot and worker thread.
//
// Shared mutable state (documented as ARCHITECTURE.md asks): the counters below are atomics
// written by the worker threads on the request path and read by selectors and metrics. The
// same EndpointState object survives rule updates as long as the endpoint (ip:port) stays.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "endpoints/health.h"

namespace kvgate::endpoints {

struct EndpointState {
  EndpointState(std::string ip_, uint16_t port_)
      : ip(std::move(ip_)),
        port(port_),
        label(ip.find(':') != std::string::npos ? "[" + ip + "]:" + std::to_string(port)
                                                : ip + ":" + std::to_string(port)) {}
  const std::string ip;
  const uint16_t port;
  const std::string label;  // "ip:port" for logs and metrics

  std::atomic<int64_t> active{0};     // requests in flight through this gateway
  std::atomic<uint64_t> requests{0};  // requests sent
  std::atomic<uint64_t> connect_failures{0};
  Health health;  // probe result, passive detection, circuit breaker
};

}  // namespace kvgate::endpoints
