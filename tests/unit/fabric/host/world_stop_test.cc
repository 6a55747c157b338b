// fabric/host/world_stop.h: parking every other thread of the process, and refusing when one
// cannot be parked.
#include "fabric/host/world_stop.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace softverbs::fabric {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif

TEST(WorldStopTest, ParksEveryOtherThreadAndReleasesThem) {
  if (kTsan) GTEST_SKIP() << "ThreadSanitizer's background thread blocks every signal: stops are refused";
  std::atomic<uint64_t> ticks{0};
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    while (!stop.load()) {
      ticks.fetch_add(1);
      usleep(100);  // a system call now and then: signals are taken even under TSan
    }
  });
  std::thread sleeper([&] { usleep(200000); });
  while (ticks.load() < 10) usleep(100);
  {
    WorldStop world;
    ASSERT_TRUE(world.StopOthers());
    EXPECT_GE(world.parked(), 2u);  // and the threads earlier tests left (softverbs' own)
    const uint64_t at = ticks.load();
    usleep(20000);
    EXPECT_EQ(ticks.load(), at);  // parked
  }
  const uint64_t after = ticks.load();
  while (ticks.load() == after) usleep(100);  // running again
  stop = true;
  spinner.join();
  sleeper.join();
}

TEST(WorldStopTest, AThreadThatBlocksTheSignalMakesTheStopFail) {
  std::atomic<bool> ready{false}, stop{false}, left_pending{true};
  std::thread blocker([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, ParkSignal());
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    ready = true;
    while (!stop.load()) usleep(100);
    sigset_t pending;
    sigpending(&pending);
    left_pending = sigismember(&pending, ParkSignal()) == 1;
  });
  while (!ready.load()) usleep(100);
  const size_t refused = RefusedStops();
  {
    WorldStop world;
    EXPECT_FALSE(world.StopOthers());
  }
  EXPECT_EQ(RefusedStops(), refused + 1);
  stop = true;
  blocker.join();
  // Its mask was read first: no signal was queued on it (real-time signals would pile up).
  EXPECT_FALSE(left_pending.load());
}

}  // namespace
}  // namespace softverbs::fabric
