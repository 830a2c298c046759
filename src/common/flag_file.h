// Flags read from a file (`kvgate serve --config FILE`), so a service unit needs no long
// command line.
//
// Format: one flag per line, `name value`, `name = value` or `name` alone (a flag without a
// value); a line becomes one argument, `--name=value` or `--name`, so a line missing its value
// can never take the next flag as one; the leading `--` of the name is optional; a value may be
// wrapped in double quotes (kept as is inside: no escapes); blank lines and lines starting with `#`
// are ignored. Bounds: the file at most 1 MiB, a line at most 4096 bytes, at most 1024 flags.
// Errors name the file and the line.
//
// expandConfigFlag: the arguments with `--config FILE` (or `--config=FILE`) replaced by the
// file's flags, put first so that flags given on the command line win (a later flag overrides
// an earlier one; a flag without a value, such as --access-log, cannot be turned off there). At
// most one --config; the file must be a regular file.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace kvgate {

// The flags of `text` as arguments ("--name", "value", ...); `where` names the file in errors.
Result<std::vector<std::string>> parseFlagFile(std::string_view text, const std::string& where);
Result<std::vector<std::string>> readFlagFile(const std::string& path);
// `args` without the program name. `*config` receives the file's path ("" without --config).
Result<std::vector<std::string>> expandConfigFlag(const std::vector<std::string>& args,
                                                  std::string* config);

}  // namespace kvgate
