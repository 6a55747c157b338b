#include "fabric/host/robust_mutex.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>

#include "fabric/host/process_token.h"

namespace softverbs::fabric {

namespace robust_mutex_detail {

std::atomic<uint64_t> self_token{0};

uint64_t ComputeSelfToken() {
  // getpid() is a system call since glibc 2.25: the token is cached, and a fork's child (a new
  // process, whose locks are its own) forgets the parent's.
  static std::once_flag at_fork;
  std::call_once(at_fork, [] {
    pthread_atfork(nullptr, nullptr, [] { self_token.store(0, std::memory_order_relaxed); });
  });
  uint64_t t = ProcessToken::Self().raw();
  // Without /proc the token is empty; the pid alone still names a holder (never zero).
  if (t == 0) t = static_cast<uint64_t>(getpid()) << 32;
  self_token.store(t, std::memory_order_relaxed);
  return t;
}

}  // namespace robust_mutex_detail

namespace {

// Holders' sections are short (a ring's slot, a few fields): a contender spins this many rounds
// before it sleeps, rather than paying two system calls for a wait of a few hundred nanoseconds.
constexpr int kRobustMutexSpins = 100;
// How long a sleeper waits before it checks that the holder still exists.
std::atomic<uint32_t> robust_mutex_sleep_slice_ms{20};

inline void RobustMutexPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

void RobustMutex::SetSleepSliceForTesting(uint32_t milliseconds) {
  robust_mutex_sleep_slice_ms.store(milliseconds, std::memory_order_relaxed);
}

// The half of the word that holds the pid and kWaiters: a sleeper's value changes whenever the
// holder does or the lock is released.
uint32_t* RobustMutex::FutexWord() {
  auto* halves = reinterpret_cast<uint32_t*>(&word_);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return halves + 1;
#else
  return halves;
#endif
}

void RobustMutex::WakeOne() { syscall(SYS_futex, FutexWord(), FUTEX_WAKE, 1, nullptr, nullptr, 0); }

// A holder that no longer exists (nor is a zombie) will never release: its lock is taken over.
bool RobustMutex::HolderIsAlive(uint64_t seen) { return ProcessToken(seen & ~kWaiters).IsAlive(); }

bool RobustMutex::LockContended(uint64_t self) {
  for (int i = 0; i < kRobustMutexSpins; ++i) {
    RobustMutexPause();
    uint64_t seen = word_.load(std::memory_order_relaxed);
    if (seen == 0 && word_.compare_exchange_weak(seen, self, std::memory_order_acquire, std::memory_order_relaxed))
      return false;
  }
  // Asleep from here on. A sleeper woken by a release takes the lock with kWaiters set, since it
  // cannot know whether others still sleep (Drepper, "Futexes Are Tricky", mutex3); at worst one
  // release wakes nobody. The holder's liveness is looked at only when a slice ran out: reading
  // /proc costs more than most waits, and a holder dies far more rarely than it is waited for.
  bool check = false;
  for (;;) {
    uint64_t seen = word_.load(std::memory_order_relaxed);
    if (seen == 0) {
      if (word_.compare_exchange_weak(seen, self | kWaiters, std::memory_order_acquire, std::memory_order_relaxed))
        return false;
      continue;
    }
    if (check && !HolderIsAlive(seen)) {
      // Taken from a dead holder, kWaiters kept: others may sleep on it. If the word moved
      // meanwhile, its new value is checked too.
      if (word_.compare_exchange_strong(seen, self | kWaiters, std::memory_order_acquire, std::memory_order_relaxed))
        return true;
      continue;
    }
    check = false;
    if (!(seen & kWaiters) &&
        !word_.compare_exchange_weak(seen, seen | kWaiters, std::memory_order_relaxed, std::memory_order_relaxed))
      continue;
    const uint32_t ms = robust_mutex_sleep_slice_ms.load(std::memory_order_relaxed);
    timespec slice{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
    // Returns at a release's wake, at once if the word moved meanwhile (EAGAIN), or after the
    // slice (ETIMEDOUT): then the holder is looked at.
    long r = syscall(SYS_futex, FutexWord(), FUTEX_WAIT, static_cast<uint32_t>((seen | kWaiters) >> 32), &slice,
                     nullptr, 0);
    if (r != 0 && errno == ETIMEDOUT) check = true;
  }
}

}  // namespace softverbs::fabric
