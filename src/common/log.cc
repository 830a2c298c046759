#include "common/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

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
}  // namespace

void setLevel(Level level) { g_level.store(static_cast<int>(level)); }
bool enabled(Level level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void write(Level level, std::string_view component, std::string_view message) {
  if (!enabled(level)) return;
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string line;
  line.reserve(64 + message.size());
  line.append(ts).append(".");
  char msbuf[8];
  std::snprintf(msbuf, sizeof msbuf, "%03dZ ", ms);
  line.append(msbuf).append(levelName(level)).append(" ").append(component).append(" ");
  line.append(message).append("\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void appendField(std::string& line, std::string_view key, std::string_view value) {
  line.append(" ").append(key).append("=");
  bool quote = value.empty() || value.find_first_of(" \"=") != std::string_view::npos;
  if (!quote) {
    line.append(value);
    return;
  }
  line.push_back('"');
  for (char c : value) {
    if (c == '"' || c == '\\') line.push_back('\\');
    line.push_back(c);
  }
  line.push_back('"');
}

}  // namespace kvgate::log
