// Authentication of the management API (issue 14 §4): bearer tokens from a file the operator
// protects (--api-token-file). The file must be a regular file owned by the user kvgate runs as
// (or root) and readable by no one else (mode 0600 or 0400); one token per line, at least 16
// characters, `#` comments and blank lines ignored, at most 64 tokens. Only SHA-256 digests are
// kept; a request's `Authorization: Bearer <token>` is hashed and compared in constant time.
// Without a file the API serves unauthenticated and may only listen on loopback unless the
// operator passes --api-insecure.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvgate::admin {

class ApiTokens {
 public:
  static Result<ApiTokens> load(const std::string& path);
  bool enabled() const { return !digests_.empty(); }
  // Whether the Authorization header's bearer token is one of the file's.
  bool allows(std::string_view authorization) const;
  size_t size() const { return digests_.size(); }

 private:
  std::vector<std::string> digests_;
};

// Paths served without a token: liveness only (/healthz, /netlox/v1/status).
bool isPublicApiPath(std::string_view path);

}  // namespace kvgate::admin
