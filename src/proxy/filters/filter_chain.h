// One gate of a rule's request filter chain (request_filter.h has the contract): `check` answers
// at once; `check_async` may wait (a shared store) and runs only when `applies` says so, so a
// request no waiting gate applies to costs no coroutine frame.
#pragma once
#include "http/asio.h"

namespace kvgate::proxy {

struct Verdict;
struct FilterEnv;

struct RequestFilter {
  const char* name;
  Verdict (*check)(FilterEnv&) = nullptr;
  bool (*applies)(const FilterEnv&) = nullptr;
  asio::awaitable<Verdict> (*check_async)(FilterEnv&) = nullptr;
};

}  // namespace kvgate::proxy
