// A mutex that lives in shared memory and survives its holder's death: when a process dies
// holding it, the next locker takes it over and is told (lock() returns true, as EOWNERDEAD of a
// robust pthread mutex), so a crash never leaves a ring locked forever (DESIGN.md section 5.4).
//
// Why not a robust pthread mutex (what this was until issue 16): glibc's robust, process-shared
// lock keeps the kernel's per-thread robust list up to date at every lock and unlock
// (__pthread_mutex_lock_full), ~130 instructions per completion pushed. This one is a single
// 64-bit word: zero when free, else the holder's ProcessToken (pid, start time:
// fabric/host/process_token.h) with kWaiters set once someone sleeps on it. Uncontended, lock()
// is one CAS and unlock() one exchange (which tells whether to wake a sleeper). A contender spins
// briefly, then sleeps on a futex on the word's half that holds the pid and kWaiters
// (futex(2), FUTEX_WAIT/FUTEX_WAKE without FUTEX_PRIVATE_FLAG: the word is shared between
// processes), waking on release -- and after a slice of 20 ms, to see whether the holder still
// exists, since a dead one never releases (robust_mutex.cc).
//
// Death is detected per process, not per thread, because a thread of a live process cannot die
// holding the lock: every caller takes it through RobustLock around a section of its own frame.
// A fatal signal ends the whole process. pthread_exit and cancellation (deferred, so only at a
// cancellation point: in a section, at most a log line's write(2) or a wire response's
// sendto(2) when an application thread polls the wire) unwind the stack in glibc, so
// RobustLock's destructor releases the lock (or, through a noexcept frame, std::terminate ends
// the process). The library's own threads are never cancelled. The fault guard's jump
// (fabric/host/fault_guard.h) never leaves a section: a guarded copy takes no lock. A thread
// that locks a lock it holds waits forever, as with the robust NORMAL pthread mutex before.
//
// Zeroed memory is an unlocked mutex; Init() is kept for the layouts that call it.
#pragma once

#include <atomic>
#include <cstdint>

#include "fabric/host/process_token.h"

namespace softverbs::fabric {

namespace robust_mutex_detail {
// This process's ProcessToken, cached (0 until first use; cleared in a fork's child).
extern std::atomic<uint64_t> self_token;
uint64_t ComputeSelfToken();
}  // namespace robust_mutex_detail

class RobustMutex {
 public:
  // Makes the mutex unlocked. Call once, by the block's owner, before publishing the block.
  void Init() { word_.store(0, std::memory_order_relaxed); }

  // Returns true if the previous holder died while holding the lock: the protected data may be
  // half-updated and the caller must repair what it can before relying on it.
  bool lock() {
    uint64_t self = robust_mutex_detail::self_token.load(std::memory_order_relaxed);
    if (self == 0) [[unlikely]]
      self = robust_mutex_detail::ComputeSelfToken();
    uint64_t expected = 0;
    if (word_.compare_exchange_strong(expected, self, std::memory_order_acquire, std::memory_order_relaxed))
      [[likely]]
      return false;
    return LockContended(self);
  }
  void unlock() {
    if (word_.exchange(0, std::memory_order_release) & kWaiters) [[unlikely]]
      WakeOne();
  }

  // Who holds it now (empty if free), and whether someone sleeps on it: for diagnostics.
  ProcessToken holder() const { return ProcessToken(word_.load(std::memory_order_relaxed) & ~kWaiters); }
  bool has_sleepers() const { return (word_.load(std::memory_order_relaxed) & kWaiters) != 0; }

  // A thread sleeps at most this long before it checks that the holder is alive (tests only).
  static void SetSleepSliceForTesting(uint32_t milliseconds);

 private:
  // A ProcessToken's top bit is always clear (pid < 2^22, PID_MAX_LIMIT): free for the flag.
  static constexpr uint64_t kWaiters = 1ull << 63;

  bool LockContended(uint64_t self);
  static bool HolderIsAlive(uint64_t seen);
  void WakeOne();
  uint32_t* FutexWord();

  std::atomic<uint64_t> word_{0};
};
static_assert(sizeof(RobustMutex) == 8 && std::atomic<uint64_t>::is_always_lock_free);

// RAII for RobustMutex; `previous_owner_died()` reports that the lock was taken over from a
// dead holder.
class RobustLock {
 public:
  explicit RobustLock(RobustMutex& m) : m_(m), owner_died_(m.lock()) {}
  ~RobustLock() { m_.unlock(); }
  RobustLock(const RobustLock&) = delete;
  RobustLock& operator=(const RobustLock&) = delete;
  bool previous_owner_died() const { return owner_died_; }

 private:
  RobustMutex& m_;
  bool owner_died_;
};

}  // namespace softverbs::fabric
