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
