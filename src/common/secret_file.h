// Secrets the operator keeps in files (management API tokens, the Redis password): the file must
// be a regular file owned by the user kvgate runs as (or root), readable and writable by no one
// else (mode 0600 or 0400), and at most `max_bytes` long, checked on the one descriptor that is
// read (a symbolic link is judged by the file it names). `flag` names the command-line option in the errors. Returns the
// lines that are neither blank nor `#` comments, trimmed of surrounding spaces and tabs.
#pragma once
#include <string>
#include <vector>

#include "common/result.h"

namespace kvgate {

Result<std::vector<std::string>> readSecretLines(const std::string& path, const std::string& flag,
                                                 size_t max_bytes = 64 * 1024);

}  // namespace kvgate
