#include "fabric/host/world_stop.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "base/log.h"

namespace softverbs::fabric {
namespace {

constexpr size_t kMaxThreads = 1024;
constexpr int64_t kDeadlineNs = 200'000'000;  // a descheduled thread on a busy 2-core host parks in ms
constexpr int64_t kBlockedGraceNs = 20'000'000;

// Odd while a stop is in progress; parked threads wait for it to change.
std::atomic<uint32_t> g_seq{0};
// Parked threads record (seq << 32 | tid): the mover counts only entries of its own stop, so a
// thread that entered the handler for an earlier stop is never taken as parked for this one.
std::atomic<uint64_t> g_acks[kMaxThreads];
std::atomic<uint32_t> g_ack_count{0};
std::atomic<size_t> g_refused{0};
// Threads inside the handler (their mask then blocks the signal, as SigBlk shows): a new stop
// waits for the last one's threads to leave before it reads masks.
std::atomic<uint32_t> g_in_handler{0};
std::mutex g_stop_mu;  // one stop at a time; held from StopOthers to Resume

pid_t Tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, nullptr, nullptr, 0);
}

void OnPark(int, siginfo_t* info, void*) {
  // Only our own tgkill (a kill() from elsewhere, or a late signal, finds nothing to do).
  if (info == nullptr || info->si_code != SI_TKILL || info->si_pid != getpid()) return;
  const int saved_errno = errno;
  g_in_handler.fetch_add(1, std::memory_order_acq_rel);
  const uint32_t seq = g_seq.load(std::memory_order_acquire);
  if (seq & 1) {
    const uint32_t i = g_ack_count.fetch_add(1, std::memory_order_acq_rel);
    if (i < kMaxThreads)
      g_acks[i].store(static_cast<uint64_t>(seq) << 32 | static_cast<uint32_t>(Tid()), std::memory_order_release);
    while (g_seq.load(std::memory_order_acquire) == seq) Futex(&g_seq, FUTEX_WAIT_PRIVATE, seq);
  }
  g_in_handler.fetch_sub(1, std::memory_order_acq_rel);
  errno = saved_errno;
}

// Installs the handler once; false if another handler holds the signal (then no stop is made).
bool HandlerInstalled() {
  struct sigaction old {};
  if (sigaction(ParkSignal(), nullptr, &old) != 0) return false;
  if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction == OnPark) return true;
  if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler != SIG_DFL) return false;
  if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction != nullptr) return false;
  struct sigaction sa {};
  sa.sa_sigaction = OnPark;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigfillset(&sa.sa_mask);  // no other handler runs in a parked thread
  return sigaction(ParkSignal(), &sa, nullptr) == 0;
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000ll + ts.tv_nsec;
}

// Writes the decimal `n` at `out`; returns the end.
char* Decimal(char* out, unsigned n) {
  char tmp[16];
  int k = 0;
  do tmp[k++] = static_cast<char>('0' + n % 10); while ((n /= 10) != 0);
  while (k > 0) *out++ = tmp[--k];
  return out;
}

struct Dirent64 {  // getdents64(2)
  uint64_t ino;
  int64_t off;
  uint16_t reclen;
  uint8_t type;
  char name[1];
};

// The threads of this process (getdents64, no allocation); SIZE_MAX if more than `cap`.
size_t ListTasks(pid_t* out, size_t cap) {
  const int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return SIZE_MAX;
  size_t n = 0;
  alignas(8) char buf[4096];
  for (;;) {
    const long got = syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (got <= 0) break;
    for (long at = 0; at < got;) {
      const auto* d = reinterpret_cast<const Dirent64*>(buf + at);
      at += d->reclen;
      unsigned tid = 0;
      const char* c = d->name;
      if (*c < '0' || *c > '9') continue;
      for (; *c >= '0' && *c <= '9'; ++c) tid = tid * 10 + static_cast<unsigned>(*c - '0');
      if (n == cap) {
        close(dir);
        return SIZE_MAX;
      }
      out[n++] = static_cast<pid_t>(tid);
    }
  }
  close(dir);
  return n;
}

// A thread that exited, or the thread-group leader left as a zombie after pthread_exit: it will
// never park and never runs.
bool TaskGone(pid_t tid) {
  if (syscall(SYS_tgkill, getpid(), tid, 0) != 0 && errno == ESRCH) return true;
  char path[64] = "/proc/self/task/";
  char* end = Decimal(path + 16, static_cast<unsigned>(tid));
  const char stat[] = "/stat";
  for (char ch : stat) *end++ = ch;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char text[512];
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return true;
  // "tid (comm) S ...": the state follows the last ')'.
  for (ssize_t i = n - 1; i > 0; --i)
    if (text[i] == ')') return i + 2 < n && (text[i + 2] == 'Z' || text[i + 2] == 'X');
  return false;
}

// True if thread `tid` blocks the park signal now (/proc/self/task/<tid>/status, "SigBlk:"): a
// signal sent to it would stay pending (queued: real-time signals accumulate) and the stop wait
// for nothing. ThreadSanitizer's background thread, and libraries' threads that block every
// signal, are such threads.
bool BlocksParkSignal(pid_t tid) {
  char path[64] = "/proc/self/task/";
  char* end = Decimal(path + 16, static_cast<unsigned>(tid));
  const char status[] = "/status";
  for (char ch : status) *end++ = ch;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // gone
  char text[2048];
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  const char* at = strstr(text, "SigBlk:");
  if (at == nullptr) return false;
  at += 7;
  while (*at == ' ' || *at == '\t') ++at;
  uint64_t mask = 0;
  for (; (*at >= '0' && *at <= '9') || (*at >= 'a' && *at <= 'f'); ++at)
    mask = mask << 4 | static_cast<uint64_t>(*at <= '9' ? *at - '0' : *at - 'a' + 10);
  return (mask >> (ParkSignal() - 1)) & 1;
}

bool Acked(uint32_t seq, pid_t tid) {
  const uint32_t n = std::min<uint32_t>(g_ack_count.load(std::memory_order_acquire), kMaxThreads);
  const uint64_t want = static_cast<uint64_t>(seq) << 32 | static_cast<uint32_t>(tid);
  for (uint32_t i = 0; i < n; ++i)
    if (g_acks[i].load(std::memory_order_acquire) == want) return true;
  return false;
}

// Per stop: each thread is signalled once (real-time signals queue), then waited for.
struct Roster {
  pid_t tids[kMaxThreads];
  bool done[kMaxThreads];  // parked or gone
  size_t n = 0;
  bool Has(pid_t tid) const {
    for (size_t i = 0; i < n; ++i)
      if (tids[i] == tid) return true;
    return false;
  }
};
Roster g_roster;  // under g_stop_mu
pid_t g_listed[kMaxThreads];

// Signals the threads of the process not yet in the roster; SIZE_MAX on overflow, else how many
// new ones it found.
size_t SignalNew(pid_t self, const char** why) {
  const size_t listed = ListTasks(g_listed, kMaxThreads);
  if (listed == SIZE_MAX) {
    *why = "more than 1024 threads";
    return SIZE_MAX;
  }
  size_t added = 0;
  for (size_t i = 0; i < listed; ++i) {
    const pid_t tid = g_listed[i];
    if (tid == self || g_roster.Has(tid)) continue;
    // A thread that pthread_create has not started yet has every signal blocked for a moment:
    // give it a few milliseconds before calling its mask its own.
    for (int64_t until = NowNs() + kBlockedGraceNs; BlocksParkSignal(tid);) {
      if (NowNs() > until) {
        *why = "a thread blocks the park signal";
        return SIZE_MAX;
      }
      sched_yield();
    }
    if (g_roster.n == kMaxThreads) {
      *why = "more than 1024 threads";
      return SIZE_MAX;
    }
    // Only ESRCH means the thread is gone. EAGAIN (the queue of real-time signals is full:
    // RLIMIT_SIGPENDING, signal(7)) or EPERM (a seccomp filter) leave it running: refuse.
    const bool sent = syscall(SYS_tgkill, getpid(), tid, ParkSignal()) == 0;
    if (!sent && errno != ESRCH) {
      *why = errno == EAGAIN ? "the park signal could not be queued (RLIMIT_SIGPENDING)" : "tgkill refused";
      return SIZE_MAX;
    }
    g_roster.tids[g_roster.n] = tid;
    g_roster.done[g_roster.n] = !sent;
    ++g_roster.n;
    ++added;
  }
  return added;
}

// Waits until every thread of the roster parked or is gone; false at the deadline.
bool WaitParked(uint32_t seq, int64_t deadline, size_t* parked) {
  for (uint32_t round = 0;; ++round) {
    bool all = true;
    *parked = 0;
    for (size_t i = 0; i < g_roster.n; ++i) {
      if (!g_roster.done[i]) g_roster.done[i] = Acked(seq, g_roster.tids[i]) || (round % 64 == 63 && TaskGone(g_roster.tids[i]));
      if (!g_roster.done[i]) all = false;
      else if (Acked(seq, g_roster.tids[i])) ++*parked;
    }
    if (all) return true;
    if (NowNs() > deadline) return false;
    if (round > 16) sched_yield();
  }
}

}  // namespace

int ParkSignal() { return SIGRTMAX - 4; }

bool WorldStop::StopOthers() {
  if (stopped_) return true;
  const pid_t self = Tid();
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved_mask_);
  g_stop_mu.lock();
  stopped_ = true;
  parked_ = 0;
  // Alone: nothing else can write (the common case of a single-threaded program).
  pid_t one[2];
  if (ListTasks(one, 2) == 1 && one[0] == self) return true;
  const char* why = "a thread did not park within 200 ms (signal blocked, uninterruptible sleep or stopped)";
  if (HandlerInstalled()) {
    const int64_t leave_by = NowNs() + kDeadlineNs;
    while (g_in_handler.load(std::memory_order_acquire) != 0 && NowNs() < leave_by) sched_yield();
    g_roster.n = 0;
    g_ack_count.store(0, std::memory_order_relaxed);
    const uint32_t seq = g_seq.fetch_add(1, std::memory_order_acq_rel) + 1;  // odd: stopping
    const int64_t deadline = NowNs() + kDeadlineNs;
    // Threads may start threads until they are parked: list again until no new one appears.
    for (;;) {
      const size_t added = SignalNew(self, &why);
      if (added == SIZE_MAX || !WaitParked(seq, deadline, &parked_)) break;
      if (added == 0) return true;
    }
  } else {
    why = "the program has a handler on the park signal";
  }
  Resume();
  g_refused.fetch_add(1, std::memory_order_relaxed);
  SV_LOG(kDebug, "stop of other threads refused: %s", why);
  return false;
}

void WorldStop::Resume() {
  if (!stopped_) return;
  stopped_ = false;
  if (g_seq.load(std::memory_order_relaxed) & 1) {
    g_seq.fetch_add(1, std::memory_order_acq_rel);  // even: released
    Futex(&g_seq, FUTEX_WAKE_PRIVATE, INT_MAX);
  }
  g_stop_mu.unlock();
  pthread_sigmask(SIG_SETMASK, &saved_mask_, nullptr);
}

size_t RefusedStops() { return g_refused.load(std::memory_order_relaxed); }

}  // namespace softverbs::fabric
