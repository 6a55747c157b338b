#include "fabric/host/robust_mutex.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace softverbs::fabric {
namespace {

// What the processes of a test share: the mutex, a counter it protects, and a flag a child
// raises once it holds the lock.
struct RobustMutexTestPage {
  RobustMutex mutex;
  uint64_t counter;
  std::atomic<uint32_t> held;
};

RobustMutexTestPage* MapRobustMutexTestPage() {
  void* p = mmap(nullptr, sizeof(RobustMutexTestPage), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<RobustMutexTestPage*>(p);  // zeroed: an unlocked mutex
}

// A read-modify-write that other holders would tear if the lock let two in at once.
void RobustMutexTestIncrement(RobustMutexTestPage& page, int times) {
  for (int i = 0; i < times; ++i) {
    RobustLock lock(page.mutex);
    EXPECT_FALSE(lock.previous_owner_died());
    const uint64_t v = page.counter;
    if (i % 64 == 0) std::this_thread::yield();  // let the other side try while this one holds
    page.counter = v + 1;
  }
}

// Waits (bounded) until `ready()`; false if it never happened.
template <typename Ready>
bool RobustMutexTestWaitFor(Ready&& ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// A child that takes the lock, says so, and waits to be killed (or gives up after 5 s).
pid_t RobustMutexTestForkHolder(RobustMutexTestPage& page) {
  pid_t child = fork();
  if (child == 0) {
    page.mutex.lock();
    page.held.store(1);
    for (int i = 0; i < 500; ++i) usleep(10000);
    _exit(0);
  }
  return child;
}

TEST(RobustMutexTest, ZeroedMemoryIsAnUnlockedMutex) {
  RobustMutexTestPage* page = MapRobustMutexTestPage();
  ASSERT_NE(page, nullptr);
  EXPECT_TRUE(page->mutex.holder().empty());
  {
    RobustLock lock(page->mutex);
    EXPECT_FALSE(lock.previous_owner_died());
    EXPECT_EQ(page->mutex.holder(), ProcessToken::Self());
    EXPECT_FALSE(page->mutex.has_sleepers());
  }
  EXPECT_TRUE(page->mutex.holder().empty());
  munmap(page, sizeof(*page));
}

TEST(RobustMutexTest, TwoThreadsExcludeEachOther) {
  RobustMutexTestPage* page = MapRobustMutexTestPage();
  ASSERT_NE(page, nullptr);
  page->mutex.Init();
  constexpr int kTimes = 5000;
  std::thread other([page] { RobustMutexTestIncrement(*page, kTimes); });
  RobustMutexTestIncrement(*page, kTimes);
  other.join();
  EXPECT_EQ(page->counter, 2u * kTimes);
  EXPECT_TRUE(page->mutex.holder().empty());
  munmap(page, sizeof(*page));
}

TEST(RobustMutexTest, TwoProcessesExcludeEachOther) {
  RobustMutexTestPage* page = MapRobustMutexTestPage();
  ASSERT_NE(page, nullptr);
  constexpr int kTimes = 5000;
  pid_t child = fork();
  if (child == 0) {
    RobustMutexTestIncrement(*page, kTimes);
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  RobustMutexTestIncrement(*page, kTimes);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(page->counter, 2u * kTimes);
  munmap(page, sizeof(*page));
}

TEST(RobustMutexTest, AHolderKilledMidSectionIsTakenOverOnce) {
  RobustMutexTestPage* page = MapRobustMutexTestPage();
  ASSERT_NE(page, nullptr);
  pid_t child = RobustMutexTestForkHolder(*page);
  ASSERT_TRUE(RobustMutexTestWaitFor([page] { return page->held.load() != 0; }));
  EXPECT_EQ(page->mutex.holder().pid(), child);
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  {
    RobustLock lock(page->mutex);
    EXPECT_TRUE(lock.previous_owner_died());
    EXPECT_EQ(page->mutex.holder(), ProcessToken::Self());
  }
  {
    RobustLock again(page->mutex);
    EXPECT_FALSE(again.previous_owner_died());
  }
  EXPECT_TRUE(page->mutex.holder().empty());
  munmap(page, sizeof(*page));
}

TEST(RobustMutexTest, ASleeperWakesWhenItsHolderIsKilled) {
  RobustMutexTestPage* page = MapRobustMutexTestPage();
  ASSERT_NE(page, nullptr);
  pid_t child = RobustMutexTestForkHolder(*page);
  ASSERT_TRUE(RobustMutexTestWaitFor([page] { return page->held.load() != 0; }));
  std::atomic<int> died{-1};
  std::thread waiter([page, &died] {
    const bool d = page->mutex.lock();
    died.store(d ? 1 : 0);
    page->mutex.unlock();
  });
  // The waiter went to sleep on the lock.
  EXPECT_TRUE(RobustMutexTestWaitFor([page] { return page->mutex.has_sleepers(); }));
  EXPECT_EQ(died.load(), -1);
  kill(child, SIGKILL);  // (not reaped before the waiter sees it: a zombie holds nothing)
  waiter.join();
  EXPECT_EQ(died.load(), 1);
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
  munmap(page, sizeof(*page));
}

TEST(RobustMutexTest, ASleeperIsWokenByTheRelease) {
  RobustMutexTestPage* page = MapRobustMutexTestPage();
  ASSERT_NE(page, nullptr);
  // A slice far longer than the test: only the release's wake can end the waiter's sleep.
  RobustMutex::SetSleepSliceForTesting(60000);
  page->mutex.lock();
  std::atomic<bool> acquired{false};
  std::thread waiter([page, &acquired] {
    RobustLock lock(page->mutex);
    acquired.store(true);
  });
  EXPECT_TRUE(RobustMutexTestWaitFor([page] { return page->mutex.has_sleepers(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // (from flag to futex wait)
  EXPECT_FALSE(acquired.load());
  page->mutex.unlock();
  EXPECT_TRUE(RobustMutexTestWaitFor([&acquired] { return acquired.load(); }));
  waiter.join();
  RobustMutex::SetSleepSliceForTesting(20);
  EXPECT_TRUE(page->mutex.holder().empty());
  munmap(page, sizeof(*page));
}

TEST(RobustMutexTest, AForkedChildHoldsItUnderItsOwnToken) {
  RobustMutexTestPage* page = MapRobustMutexTestPage();
  ASSERT_NE(page, nullptr);
  { RobustLock lock(page->mutex); }  // the parent's token is cached before the fork
  pid_t child = fork();
  if (child == 0) {
    page->mutex.lock();
    const bool own = page->mutex.holder() == ProcessToken::Self() && page->mutex.holder().pid() == getpid();
    if (!own) page->mutex.unlock();
    _exit(own ? 0 : 1);  // dies holding it if it took it as itself
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child locked under its parent's token";
  {
    RobustLock lock(page->mutex);
    EXPECT_TRUE(lock.previous_owner_died());
  }
  munmap(page, sizeof(*page));
}

}  // namespace
}  // namespace softverbs::fabric

#include "fabric/host/token_lock.h"

namespace softverbs::fabric {
namespace {

TEST(TokenLockTest, ALockOfADeadProcessIsTakenOver) {
  auto* word = static_cast<std::atomic<uint64_t>*>(
      mmap(nullptr, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(word, MAP_FAILED);
  pid_t child = fork();
  if (child == 0) {
    word->store(ProcessToken::Self().raw());  // takes the lock and dies with it
    _exit(0);
  }
  int status;
  waitpid(child, &status, 0);
  ASSERT_NE(word->load(), 0u);
  {
    TokenLock lock(*word, ProcessToken::Self());
    EXPECT_EQ(word->load(), ProcessToken::Self().raw());
  }
  EXPECT_EQ(word->load(), 0u);
  munmap(word, sizeof(uint64_t));
}

}  // namespace
}  // namespace softverbs::fabric
