#include "common/log.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kvgate::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kInfo)};

const char* levelName(Level l) {
  switch (l) {
    case Level::kDebug:
      return "DEBUG";
    case Level::kInfo:
      return "INFO";
    case Level::kWarn:
      return "WARN";
    case Level::kError:
      return "ERROR";
  }
  return "?";
}

// One thread's pending lines. The mutex is held only to append or to swap the string out,
// never across the write to stderr.
struct ThreadBuf {
  std::mutex mu;
  std::string pending;
};

// The drain thread and the registry of per-thread buffers.
class Sink {
 public:
  static Sink& get() {
    static Sink* s = new Sink();  // never destroyed: threads may log during static destruction
    return *s;
  }
  ThreadBuf& local() {
    thread_local std::shared_ptr<ThreadBuf> buf = registerThread();
    return *buf;
  }
  void append(std::string_view line) {
    ThreadBuf& b = local();
    bool was_empty;
    {
      std::lock_guard<std::mutex> g(b.mu);
      if (b.pending.size() + line.size() > kMaxPending) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      was_empty = b.pending.empty();
      b.pending.append(line);
    }
    if (was_empty && idle_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> g(mu_);
      wake_ = true;
      cv_.notify_one();
    }
  }
  // Writes every buffer's pending lines (any thread; serialised by write_mu_).
  void drainAll() {
    std::vector<std::shared_ptr<ThreadBuf>> bufs;
    {
      std::lock_guard<std::mutex> g(mu_);
      bufs = bufs_;
    }
    std::lock_guard<std::mutex> w(write_mu_);
    for (auto& b : bufs) {
      {
        std::lock_guard<std::mutex> g(b->mu);
        scratch_.swap(b->pending);
      }
      if (!scratch_.empty()) std::fwrite(scratch_.data(), 1, scratch_.size(), stderr);
      scratch_.clear();
    }
    std::fflush(stderr);
    // Forget buffers of threads that have exited (only the registry holds them) once drained.
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = bufs_.begin(); it != bufs_.end();) {
      if (it->use_count() == 2) {  // bufs_ and our local copy
        std::lock_guard<std::mutex> bg((*it)->mu);
        if ((*it)->pending.empty()) {
          it = bufs_.erase(it);
          continue;
        }
      }
      ++it;
    }
  }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  Sink() {
    std::thread([this] { run(); }).detach();
    std::atexit([] { Sink::get().drainAll(); });
  }
  std::shared_ptr<ThreadBuf> registerThread() {
    auto b = std::make_shared<ThreadBuf>();
    std::lock_guard<std::mutex> g(mu_);
    bufs_.push_back(b);
    return b;
  }
  bool anyPending() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& b : bufs_) {
      std::lock_guard<std::mutex> bg(b->mu);
      if (!b->pending.empty()) return true;
    }
    return false;
  }
  // Drains, then sleeps a batching window; waits on the condition variable only when a drain
  // found nothing, so busy writers do not pay a wake-up per line. `idle_` is raised before the
  // last look at the buffers: a line appended after that look sees it and wakes us.
  void run() {
    for (;;) {
      drainAll();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      idle_.store(true, std::memory_order_seq_cst);
      if (!anyPending()) {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait_for(lk, std::chrono::seconds(1), [this] { return wake_; });
        wake_ = false;
      }
      idle_.store(false, std::memory_order_seq_cst);
    }
  }
  std::mutex mu_;  // bufs_, cv_
  std::condition_variable cv_;
  std::vector<std::shared_ptr<ThreadBuf>> bufs_;
  std::atomic<bool> idle_{false};
  bool wake_ = false;  // guarded by mu_
  std::atomic<uint64_t> dropped_{0};
  std::mutex write_mu_;
  std::string scratch_;  // guarded by write_mu_
};

bool needsEscape(unsigned char c) { return c < 0x20 || c == 0x7f; }

void escapeByte(std::string& out, unsigned char c) {
  switch (c) {
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    default: {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
}

}  // namespace

void setLevel(Level level) { g_level.store(static_cast<int>(level)); }
bool enabled(Level level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}
uint64_t droppedLines() { return Sink::get().dropped(); }
void flush() { Sink::get().drainAll(); }

void appendEscaped(std::string& line, std::string_view s) {
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (needsEscape(c))
      escapeByte(line, c);
    else
      line.push_back(ch);
  }
}

void write(Level level, std::string_view component, std::string_view message) {
  if (!enabled(level)) return;
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[40];
  size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(ts + n, sizeof ts - n, ".%03dZ ", ms);
  thread_local std::string line;
  line.clear();
  line.append(ts).append(levelName(level)).append(" ");
  appendEscaped(line, component);
  line.append(" ");
  appendEscaped(line, message);
  line.append("\n");
  Sink::get().append(line);
}

void appendField(std::string& line, std::string_view key, std::string_view value) {
  line.append(" ").append(key).append("=");
  bool quote = value.empty();
  for (char ch : value) {
    auto c = static_cast<unsigned char>(ch);
    if (c == ' ' || c == '"' || c == '=' || c == '\\' || needsEscape(c)) {
      quote = true;
      break;
    }
  }
  if (!quote) {
    line.append(value);
    return;
  }
  line.push_back('"');
  for (char ch : value) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      line.push_back('\\');
      line.push_back(ch);
    } else if (needsEscape(c)) {
      escapeByte(line, c);
    } else {
      line.push_back(ch);
    }
  }
  line.push_back('"');
}

}  // namespace kvgate::log
