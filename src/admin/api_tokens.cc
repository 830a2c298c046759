#include "admin/api_tokens.h"

#include <openssl/crypto.h>

#include "common/secret_file.h"
#include "governance/api_keys.h"

namespace kvgate::admin {

Result<ApiTokens> ApiTokens::load(const std::string& path) {
  auto lines = readSecretLines(path, "--api-token-file");
  if (!lines) return tl::unexpected(lines.error());
  ApiTokens t;
  int n = 0;
  for (const auto& line : *lines) {
    ++n;
    if (line.size() < 16)
      return fail(2, "api-token-file",
                  "--api-token-file token " + std::to_string(n) + ": a token needs 16 characters");
    if (line.find_first_of(" \t") != std::string::npos)
      return fail(2, "api-token-file",
                  "--api-token-file token " + std::to_string(n) + ": one token per line");
    if (t.digests_.size() >= 64) return fail(2, "api-token-file", "--api-token-file: at most 64");
    t.digests_.push_back(governance::hashSecret({}, line));
  }
  if (t.digests_.empty())
    return fail(2, "api-token-file", "--api-token-file " + path + " holds no token");
  return t;
}

bool ApiTokens::allows(std::string_view authorization) const {
  const std::string_view tok = governance::requestKey({}, authorization);  // the bearer value
  if (tok.empty()) return false;
  const std::string d = governance::hashSecret({}, tok);
  bool ok = false;
  for (const auto& x : digests_) ok |= CRYPTO_memcmp(x.data(), d.data(), d.size()) == 0;
  return ok;
}

bool isPublicApiPath(std::string_view path) {
  // (/ui is the dashboard's page: no data in it; its stream asks for the token)
  return path == "/healthz" || path == "/netlox/v1/status" || path == "/ui" || path == "/ui/";
}

}  // namespace kvgate::admin
