#include "common/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/lines.h"

namespace kvgate {

Result<std::vector<std::string>> readSecretLines(const std::string& path, const std::string& flag,
                                                 size_t max_bytes) {
  const std::string field = flag.substr(flag.find_first_not_of('-'));
  // Opened once, without blocking on a FIFO; every check is on the descriptor that is read, so
  // a symbolic link (as Kubernetes mounts secrets) is judged by the file it names, and nothing
  // can be swapped between a check and the read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fail(2, field, flag + " " + path + ": cannot open it");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail(2, field, flag + " " + path + ": cannot stat it");
  if (!S_ISREG(st.st_mode)) return fail(2, field, flag + " " + path + " is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return fail(2, field, flag + " " + path + " must be owned by the user kvgate runs as");
  if (st.st_mode & 077)
    return fail(2, field, flag + " " + path + " is readable or writable by others: chmod 600 it");
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(2, field, flag + " " + path + ": cannot read it");
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes)
      return fail(2, field, flag + " " + path + " is over " + std::to_string(max_bytes) + " bytes");
  }
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    std::string_view line = nextLine(text, at);
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string_view::npos || line[b] == '#') continue;
    line = line.substr(b, line.find_last_not_of(" \t\r") + 1 - b);  // (as before: CRs trailing too)
    out.emplace_back(line);
  }
  return out;
}

}  // namespace kvgate
