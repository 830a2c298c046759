// A kvgate child process of the fleet benchmark (`kvgate sim`, `kvgate serve`): spawned from
// this binary (/proc/self/exe), its first stdout line that is a JSON object with "event":"ready"
// awaited (bounded), its later stdout read and dropped (a full pipe would block it), its stderr
// kept in a log file; SIGTERM and waited for on destruction, and sent SIGTERM by the kernel if
// this process dies first (PR_SET_PDEATHSIG).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace kvgate::bench::fleet {

class Child {
 public:
  // Starts `kvgate <args...>`; ok() is false (and error() says why) when it did not become
  // ready within `timeout`.
  Child(std::vector<std::string> args, const std::string& stderr_path,
        std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool ok() const { return !ready_.is_discarded() && ready_.is_object(); }
  const nlohmann::json& ready() const { return ready_; }
  const std::string& error() const { return error_; }
  pid_t pid() const { return pid_; }
  // User + system CPU seconds the process has used (from /proc/<pid>/stat); -1 when unknown.
  double cpuSeconds() const;

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  nlohmann::json ready_ = nlohmann::json(nlohmann::json::value_t::discarded);
  std::string error_;
  std::thread drain_;  // reads (and drops) the child's stdout after its ready line
};

}  // namespace kvgate::bench::fleet
