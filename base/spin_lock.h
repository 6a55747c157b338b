// A lock for short sections of one process's threads: a send queue's post, a CQ's poll (mlx5's
// provider takes a pthread spin lock for both). Taking it is one exchange; releasing it a plain
// store. A std::mutex releases with a locked instruction too (it must see whether a sleeper
// needs waking): two per post, two per poll. A waiter spins on a load (no line ping-pong),
// yields the CPU now and then so that a preempted holder runs, and after a few milliseconds of
// that sleeps between looks (a holder that waits long: a LOCAL_INV posted on the send queue
// waits for the accesses through its key to end).
#pragma once

#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstdint>

namespace softverbs {

class SpinLock {
 public:
  void lock() {
    if (!flag_.exchange(true, std::memory_order_acquire)) return;
    for (uint32_t spins = 1;; ++spins) {
      if (!flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire)) return;
      if (spins % 128 != 0) {
        Relax();
      } else if (spins < 128 * 1024) {
        sched_yield();
      } else {
        const timespec nap{0, 50 * 1000};
        nanosleep(&nap, nullptr);
      }
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
