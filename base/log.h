// Logging: SOFTVERBS_LOG=error|warn|info|debug|trace turns it on (stderr, or the file named by
// SOFTVERBS_LOG_FILE). Off by default: a library must not print unless asked.
#pragma once

#include <cstdarg>

namespace softverbs::log {

enum class Level { kOff = 0, kError, kWarn, kInfo, kDebug, kTrace };

// The level chosen by the environment, read once.
Level CurrentLevel();

inline bool Enabled(Level level) { return level != Level::kOff && level <= CurrentLevel(); }

// Writes one line "softverbs[<pid>] <level>: <text>\n" atomically (one write(2)).
void Write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// For tests: re-read the environment.
void ReloadForTesting();

}  // namespace softverbs::log

#define SV_LOG(level, ...)                                                \
  do {                                                                   \
    if (::softverbs::log::Enabled(::softverbs::log::Level::level))       \
      ::softverbs::log::Write(::softverbs::log::Level::level, __VA_ARGS__); \
  } while (0)
