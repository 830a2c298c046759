#include "bench/fleet/child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace kvgate::bench::fleet {

Child::Child(std::vector<std::string> args, const std::string& stderr_path,
             std::chrono::milliseconds timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    error_ = "pipe failed";
    return;
  }
  std::string self = "/proc/self/exe";
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) self.assign(buf, static_cast<size_t>(n));
  args.insert(args.begin(), self);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  // fork + exec (not posix_spawn): the child asks to be sent SIGTERM when this process dies, so a
  // benchmark killed mid-run leaves no simulator or gateway behind. Only async-signal-safe calls
  // between fork and exec; everything they use was prepared above.
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
    dup2(fds[1], 1);
    const int err_fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (err_fd >= 0) dup2(err_fd, 2);
    execv(self.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
  if (pid_ <= 0) {
    pid_ = -1;
    error_ = "could not start " + self;
    return;
  }
  // Lines until the ready one (each bounded); the deadline is one-sided.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd pfd{out_fd_, POLLIN, 0};
    char c;
    if (left <= 0 || ::poll(&pfd, 1, static_cast<int>(left)) != 1 || read(out_fd_, &c, 1) != 1) {
      error_ = "kvgate " + args[1] + " did not print its ready line (see " + stderr_path + ")";
      return;
    }
    if (c != '\n') {
      if (line.size() < (1u << 20)) line.push_back(c);
      continue;
    }
    auto j = nlohmann::json::parse(line, nullptr, false);
    line.clear();
    if (j.is_object() && j.value("event", "") == "ready") {
      ready_ = std::move(j);
      drain_ = std::thread([fd = out_fd_] {
        char sink[4096];
        while (read(fd, sink, sizeof sink) > 0) {
        }
      });
      return;
    }
  }
}

Child::~Child() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int st;
    waitpid(pid_, &st, 0);
  }
  if (drain_.joinable()) drain_.join();  // the child's end of the pipe closed with it
  if (out_fd_ >= 0) close(out_fd_);
}

double Child::cpuSeconds() const {
  if (pid_ <= 0) return -1;
  std::ifstream f("/proc/" + std::to_string(pid_) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t p = s.rfind(')');  // the command name may hold spaces
  if (p == std::string::npos) return -1;
  std::istringstream in(s.substr(p + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {  // fields 14 and 15: utime, stime (ticks)
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  return hz > 0 ? (utime + stime) / hz : -1;
}

}  // namespace kvgate::bench::fleet
