// Structured logger: one line per event, "ts level component msg key=value...".
//
// Writers never block on I/O: a line is appended to its thread's bounded buffer (kMaxPending
// bytes) and one background thread drains every buffer to stderr. A line that does not fit is
// dropped and counted (droppedLines(), exposed as kvgate_log_dropped_total). Control bytes in a
// message are escaped, so no field can forge a line. flush() drains synchronously (exit paths).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace kvgate::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

constexpr size_t kMaxPending = 1024 * 1024;  // per-thread buffer bound

void setLevel(Level level);
bool enabled(Level level);
void write(Level level, std::string_view component, std::string_view message);
// Writes every pending line now (blocking; call on exit paths, not on an event loop).
void flush();
uint64_t droppedLines();

inline void info(std::string_view c, std::string_view m) { write(Level::kInfo, c, m); }
inline void warn(std::string_view c, std::string_view m) { write(Level::kWarn, c, m); }
inline void error(std::string_view c, std::string_view m) { write(Level::kError, c, m); }
inline void debug(std::string_view c, std::string_view m) {
  if (enabled(Level::kDebug)) write(Level::kDebug, c, m);
}

// Appends ` key=value`; the value is quoted when it is empty or holds spaces, quotes, '=' or
// control bytes, and inside quotes '"', '\' and control bytes are escaped (\n, \r, \t, \xHH).
void appendField(std::string& line, std::string_view key, std::string_view value);
// Appends `s` with control bytes escaped as above (no quoting).
void appendEscaped(std::string& line, std::string_view s);

}  // namespace kvgate::log
