// A mutex that lives in shared memory and survives its holder's death: when a process dies
// holding it, the next locker is told (EOWNERDEAD) and the lock is made consistent again, so a
// crash never leaves a ring locked forever (DESIGN.md section 5.4).
#pragma once

#include <pthread.h>

#include <cerrno>

namespace softverbs::fabric {

class RobustMutex {
 public:
  // Placement-initialises the mutex in zeroed shared memory. Call once, by the block's owner,
  // before publishing the block to peers.
  void Init() {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&m_, &a);
    pthread_mutexattr_destroy(&a);
  }

  // Returns true if the previous holder died while holding the lock: the protected data may be
  // half-updated and the caller must repair what it can before relying on it.
  bool lock() {
    int r = pthread_mutex_lock(&m_);
    if (r == EOWNERDEAD) {
      pthread_mutex_consistent(&m_);
      return true;
    }
    return false;
  }
  void unlock() { pthread_mutex_unlock(&m_); }

 private:
  pthread_mutex_t m_;
};

// RAII for RobustMutex; `previous_owner_died()` reports EOWNERDEAD.
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
