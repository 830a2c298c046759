#include "common/secret_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace kvgate {

Result<std::vector<std::string>> readSecretLines(const std::string& path, const std::string& flag,
                                                 size_t max_bytes) {
  const std::string field = flag.substr(flag.find_first_not_of('-'));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fail(2, field, flag + " " + path + ": cannot stat it");
  if (!S_ISREG(st.st_mode)) return fail(2, field, flag + " " + path + " is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return fail(2, field, flag + " " + path + " must be owned by the user kvgate runs as");
  if (st.st_mode & 077)
    return fail(2, field, flag + " " + path + " is readable or writable by others: chmod 600 it");
  if (static_cast<size_t>(st.st_size) > max_bytes)
    return fail(2, field, flag + " " + path + " is over " + std::to_string(max_bytes) + " bytes");
  std::ifstream f(path);
  if (!f) return fail(2, field, flag + " " + path + ": cannot read it");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(f, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    out.push_back(line.substr(b));
  }
  return out;
}

}  // namespace kvgate
