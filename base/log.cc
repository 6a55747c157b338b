#include "base/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace softverbs::log {
namespace {

struct Config {
  Level level = Level::kOff;
  int fd = STDERR_FILENO;
};

Level ParseLevel(const char* s) {
  if (s == nullptr || *s == '\0') return Level::kOff;
  static constexpr struct {
    const char* name;
    Level level;
  } kNames[] = {{"error", Level::kError}, {"warn", Level::kWarn},   {"info", Level::kInfo},
                {"debug", Level::kDebug}, {"trace", Level::kTrace}, {"off", Level::kOff}};
  for (const auto& n : kNames)
    if (strcasecmp(s, n.name) == 0) return n.level;
  // Any other non-empty value (e.g. "1") means "show refusals".
  return Level::kError;
}

Config Load() {
  Config c;
  c.level = ParseLevel(getenv("SOFTVERBS_LOG"));
  if (const char* path = getenv("SOFTVERBS_LOG_FILE"); path && *path && c.level != Level::kOff) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) c.fd = fd;  // kept for the life of the process, like stderr
  }
  return c;
}

std::atomic<int> g_level{-1};
std::atomic<int> g_fd{STDERR_FILENO};

void Init() {
  Config c = Load();
  g_fd.store(c.fd, std::memory_order_relaxed);
  g_level.store(static_cast<int>(c.level), std::memory_order_release);
}

const char* Name(Level level) {
  switch (level) {
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
    case Level::kDebug: return "debug";
    case Level::kTrace: return "trace";
    case Level::kOff: break;
  }
  return "off";
}

}  // namespace

Level CurrentLevel() {
  int l = g_level.load(std::memory_order_acquire);
  if (l < 0) {
    static std::once_flag once;
    std::call_once(once, Init);
    l = g_level.load(std::memory_order_acquire);
  }
  return static_cast<Level>(l);
}

void ReloadForTesting() {
  int old = g_fd.load(std::memory_order_relaxed);
  Init();
  if (old != STDERR_FILENO && old != g_fd.load(std::memory_order_relaxed)) close(old);
}

void Write(Level level, const char* fmt, ...) {
  char line[1024];
  int n = snprintf(line, sizeof(line), "softverbs[%d] %s: ", static_cast<int>(getpid()), Name(level));
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
  va_end(ap);
  size_t len = n + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof(line) - 2) len = sizeof(line) - 2;
  line[len++] = '\n';
  // One write(2) per line so lines of concurrent processes do not interleave.
  ssize_t ignored = write(g_fd.load(std::memory_order_relaxed), line, len);
  (void)ignored;
}

}  // namespace softverbs::log
