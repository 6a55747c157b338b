// A lock for short sections of one process's threads whose holder never sleeps while holding
// it: a send queue's post, a CQ's poll (mlx5's provider takes a pthread spin lock for both).
// Taking it is one exchange; releasing it a plain store. A std::mutex releases with a locked
// instruction too (it must see whether a sleeper needs waking): two per post, two per poll.
// A waiter spins on a load (no line ping-pong) and yields the CPU now and then, so a holder that
// was preempted gets to run.
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

namespace softverbs {

class SpinLock {
 public:
  void lock() {
    if (!flag_.exchange(true, std::memory_order_acquire)) return;
    for (uint32_t spins = 1;; ++spins) {
      if (!flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire)) return;
      if (spins % 128 == 0)
        sched_yield();
      else
        Relax();
    }
  }
  bool try_lock() { return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire); }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  static void Relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  std::atomic<bool> flag_{false};
};

}  // namespace softverbs
