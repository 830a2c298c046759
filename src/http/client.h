// Blocking HTTP/1.1 client for the command-line tools (`kvgate ctl`), one request per connection.
#pragma once
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace kvgate::http {

struct ClientResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// A bearer token every later fetch sends (`kvgate ctl --token-file`, or $KVGATE_API_TOKEN);
// empty: none. Process-wide: the command-line tools make one call at a time.
void setBearerToken(std::string token);

// `url` is http://host:port[/base]; `target` is appended to the base path.
// HTTPS: verify servers against this PEM CA file instead of the system's CAs.
void setCaFile(std::string path);
struct FetchOptions {
  std::string ca_file;                         // overrides setCaFile's for this call
  size_t max_body_bytes = size_t(64) << 20;    // a longer answer is an error (413)
  bool send_token = true;                      // setBearerToken's token (the API's, for ctl)
};
Result<ClientResponse> fetch(const std::string& url, const std::string& method,
                             const std::string& target, const std::string& body = {},
                             const std::string& content_type = "application/json",
                             std::chrono::milliseconds timeout = std::chrono::seconds(10),
                             const FetchOptions& opts = {});

}  // namespace kvgate::http
