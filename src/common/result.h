// Result<T>: the error channel for the request path and the control plane (no exceptions there).
#pragma once
#include <string>
#include <tl/expected.hpp>

namespace kvgate {

struct Error {
  int code = 0;            // HTTP-style status where one applies (400, 409, 502, ...)
  std::string source;      // what failed: a field name, "bind", "upstream", ...
  bool retryable = false;  // may the caller try again elsewhere
  std::string what;        // human-readable message
};

template <typename T>
using Result = tl::expected<T, Error>;

inline tl::unexpected<Error> fail(int code, std::string source, std::string what,
                                  bool retryable = false) {
  return tl::unexpected<Error>(Error{code, std::move(source), retryable, std::move(what)});
}

}  // namespace kvgate
