// Minimal structured logger: one line per event to stderr, "ts level component msg key=value...".
#pragma once
#include <string>
#include <string_view>

namespace kvgate::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void setLevel(Level level);
bool enabled(Level level);
void write(Level level, std::string_view component, std::string_view message);

inline void info(std::string_view c, std::string_view m) { write(Level::kInfo, c, m); }
inline void warn(std::string_view c, std::string_view m) { write(Level::kWarn, c, m); }
inline void error(std::string_view c, std::string_view m) { write(Level::kError, c, m); }
inline void debug(std::string_view c, std::string_view m) {
  if (enabled(Level::kDebug)) write(Level::kDebug, c, m);
}

// Appends ` key=value` (value quoted when it holds spaces or quotes) for access-log style lines.
void appendField(std::string& line, std::string_view key, std::string_view value);

}  // namespace kvgate::log
