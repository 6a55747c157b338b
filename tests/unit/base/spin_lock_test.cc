#include "base/spin_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace softverbs {
namespace {

TEST(SpinLockTest, ExcludesOtherThreads) {
  SpinLock lock;
  uint64_t counter = 0;  // plain: only the lock orders the increments (TSan checks it)
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        std::lock_guard guard(lock);
        ++counter;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, 4u * 20000u);
}

TEST(SpinLockTest, TryLockFailsWhileHeldAndSucceedsAfter) {
  SpinLock lock;
  ASSERT_TRUE(lock.try_lock());
  EXPECT_FALSE(lock.try_lock());
  lock.unlock();
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST(SpinLockTest, AWaiterGetsItAfterALongHoldAndSeesTheHoldersWrites) {
  // Long enough to go past the spinning and yielding into the sleeping waits.
  SpinLock lock;
  int written = 0;
  std::atomic<bool> holding{false};
  lock.lock();
  std::thread waiter([&] {
    holding.store(true);
    std::lock_guard guard(lock);
    EXPECT_EQ(written, 42);
  });
  while (!holding.load()) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  written = 42;
  lock.unlock();
  waiter.join();
}

}  // namespace
}  // namespace softverbs
