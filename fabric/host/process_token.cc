#include "fabric/host/process_token.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/unique_fd.h"

namespace softverbs::fabric {
namespace {

// Field 22 of /proc/<pid>/stat (proc(5)): the start time. The comm field may contain spaces and
// parentheses, so parsing starts after its last ')'.
bool ReadStartTime(pid_t pid, uint64_t* start) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  char buf[1024];
  ssize_t n = read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return false;
  p += 2;  // now at field 3 (state)
  // A zombie (Z) or dead (X) process has released everything; only reaping is left.
  if (*p == 'Z' || *p == 'X') return false;
  for (int field = 3; field < 22; ++field) {
    p = strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  *start = strtoull(p, nullptr, 10);
  return true;
}

std::atomic<uint64_t> g_self{0};
std::atomic<pid_t> g_self_pid{0};

}  // namespace

ProcessToken ProcessToken::Of(pid_t pid) {
  uint64_t start = 0;
  if (pid <= 0 || !ReadStartTime(pid, &start)) return ProcessToken();
  return ProcessToken(static_cast<uint64_t>(pid) << 32 | (start & 0xffffffffu));
}

ProcessToken ProcessToken::Self() {
  pid_t pid = getpid();
  if (g_self_pid.load(std::memory_order_acquire) != pid) {  // first use, or after fork()
    g_self.store(Of(pid).raw(), std::memory_order_relaxed);
    g_self_pid.store(pid, std::memory_order_release);
  }
  return ProcessToken(g_self.load(std::memory_order_relaxed));
}

bool ProcessToken::IsAlive() const {
  if (empty()) return false;
  return Of(pid()) == *this;
}

}  // namespace softverbs::fabric
