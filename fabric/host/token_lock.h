// A spin lock in shared memory whose word is the holder's ProcessToken: zero is unlocked (so a
// zeroed region needs no initialisation), and a lock held by a dead process is taken over. For
// short critical sections only (an atomic's read-modify-write of 8 bytes).
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "fabric/host/process_token.h"

namespace softverbs::fabric {

class TokenLock {
 public:
  TokenLock(std::atomic<uint64_t>& word, ProcessToken self) : word_(word), self_(self.raw()) {
    for (uint32_t spins = 1;; ++spins) {
      uint64_t expected = 0;
      if (word_.compare_exchange_weak(expected, self_, std::memory_order_acquire)) return;
      if (spins % 64 == 0) {
        // Now and then, see whether the holder still exists; take the lock over if not.
        if (expected != 0 && !ProcessToken(expected).IsAlive() &&
            word_.compare_exchange_strong(expected, self_, std::memory_order_acquire))
          return;
        sched_yield();
      }
    }
  }
  ~TokenLock() { word_.store(0, std::memory_order_release); }
  TokenLock(const TokenLock&) = delete;
  TokenLock& operator=(const TokenLock&) = delete;

 private:
  std::atomic<uint64_t>& word_;
  uint64_t self_;
};

}  // namespace softverbs::fabric
