#include "admin/api_tokens.h"

#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "governance/api_keys.h"

namespace kvgate::admin {

Result<ApiTokens> ApiTokens::load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return fail(2, "api-token-file", "--api-token-file " + path + ": cannot stat it");
  if (!S_ISREG(st.st_mode))
    return fail(2, "api-token-file", "--api-token-file " + path + " is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return fail(2, "api-token-file",
                "--api-token-file " + path + " must be owned by the user kvgate runs as");
  if (st.st_mode & 077)
    return fail(2, "api-token-file",
                "--api-token-file " + path + " is readable or writable by others: chmod 600 it");
  if (st.st_size > 64 * 1024)
    return fail(2, "api-token-file", "--api-token-file " + path + " is over 64 KiB");
  std::ifstream f(path);
  if (!f) return fail(2, "api-token-file", "--api-token-file " + path + ": cannot read it");
  ApiTokens t;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    line = line.substr(b);
    if (line.size() < 16)
      return fail(2, "api-token-file",
                  "--api-token-file line " + std::to_string(n) + ": a token needs 16 characters");
    if (line.find_first_of(" \t") != std::string::npos)
      return fail(2, "api-token-file",
                  "--api-token-file line " + std::to_string(n) + ": one token per line");
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
  return path == "/healthz" || path == "/netlox/v1/status";
}

}  // namespace kvgate::admin
