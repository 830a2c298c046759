// Flags from a file. See flag_file.h.
#include "common/flag_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvgate {
namespace {
constexpr size_t kMaxFileBytes = 1 << 20;
constexpr size_t kMaxLineBytes = 4096;
constexpr size_t kMaxFlags = 1024;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}
}  // namespace

Result<std::vector<std::string>> parseFlagFile(std::string_view text, const std::string& where) {
  if (text.size() > kMaxFileBytes) return fail(400, where, where + ": larger than 1 MiB");
  std::vector<std::string> out;
  size_t line_no = 0, flags = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t nl = std::min(text.find('\n', at), text.size());
    const std::string_view raw = text.substr(at, nl - at);
    at = nl + 1;
    ++line_no;
    const std::string here = where + ":" + std::to_string(line_no);
    if (raw.size() > kMaxLineBytes) return fail(400, where, here + ": line longer than 4096 bytes");
    std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    if (line.find('\0') != std::string_view::npos) return fail(400, where, here + ": a NUL byte");
    if (++flags > kMaxFlags) return fail(400, where, here + ": more than 1024 flags");
    // The name: up to whitespace or '='.
    size_t end = 0;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t' && line[end] != '=') ++end;
    std::string_view name = line.substr(0, end);
    if (name.substr(0, 2) == "--") name.remove_prefix(2);
    if (name.empty() || name.front() == '-')
      return fail(400, where, here + ": expected a flag name, got '" + std::string(line) + "'");
    for (char c : name)
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
        return fail(400, where, here + ": '" + std::string(name) + "' is not a flag name");
    std::string_view value = trim(line.substr(end));
    if (!value.empty() && value.front() == '=') value = trim(value.substr(1));
    if (value.empty()) {  // (a flag without a value)
      out.push_back("--" + std::string(name));
      continue;
    }
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
      value = value.substr(1, value.size() - 2);
    else if (value.front() == '"' || value.back() == '"')
      return fail(400, where, here + ": unbalanced quote in the value of --" + std::string(name));
    // One argument, so a line can never take the next line's flag as its value.
    out.push_back("--" + std::string(name) + "=" + std::string(value));
  }
  return out;
}

Result<std::vector<std::string>> readFlagFile(const std::string& path) {
  // (never blocks: a FIFO or a device is refused before it is read)
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return fail(400, path, "cannot open the config file " + path + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return fail(400, path, "the config file " + path + " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes)
    return fail(400, path, path + ": larger than 1 MiB");
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(400, path, "error reading the config file " + path);
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxFileBytes) return fail(400, path, path + ": larger than 1 MiB");
  }
  return parseFlagFile(text, path);
}

Result<std::vector<std::string>> expandConfigFlag(const std::vector<std::string>& args,
                                                  std::string* config) {
  config->clear();
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string path;
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) return fail(400, "--config", "--config needs a file");
      path = args[++i];
    } else if (args[i].rfind("--config=", 0) == 0) {
      path = args[i].substr(9);
    } else {
      rest.push_back(args[i]);
      continue;
    }
    if (!config->empty()) return fail(400, "--config", "--config given more than once");
    if (path.empty()) return fail(400, "--config", "--config needs a file");
    *config = path;
  }
  if (config->empty()) return rest;
  auto file = readFlagFile(*config);
  if (!file) return file;
  for (const auto& a : *file)
    if (a == "--config" || a.rfind("--config=", 0) == 0)
      return fail(400, *config, *config + ": a config file cannot name another");
  file->insert(file->end(), rest.begin(), rest.end());
  return file;
}

}  // namespace kvgate
