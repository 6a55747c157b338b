#include "fabric/host/robust_mutex.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace softverbs::fabric {
namespace {

TEST(RobustMutexTest, AHolderThatDiesDoesNotBlockOthers) {
  auto* shared = static_cast<RobustMutex*>(
      mmap(nullptr, sizeof(RobustMutex), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(shared, MAP_FAILED);
  shared->Init();
  pid_t child = fork();
  if (child == 0) {
    shared->lock();
    _exit(0);  // dies holding the lock
  }
  int status;
  waitpid(child, &status, 0);
  {
    RobustLock lock(*shared);
    EXPECT_TRUE(lock.previous_owner_died());
  }
  {
    RobustLock again(*shared);
    EXPECT_FALSE(again.previous_owner_died());
  }
  munmap(shared, sizeof(RobustMutex));
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
