// fabric/host/world_stop.h: parking every other thread of the process, and refusing when one
// cannot be parked.
#include "fabric/host/world_stop.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace softverbs::fabric {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kWorldStopTsan = true;
#else
constexpr bool kWorldStopTsan = false;
#endif

TEST(WorldStopTest, ParksEveryOtherThreadAndReleasesThem) {
  if (kWorldStopTsan) GTEST_SKIP() << "ThreadSanitizer's background thread blocks every signal: stops are refused";
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

// A real-time signal that cannot be queued (tgkill fails with EAGAIN once RLIMIT_SIGPENDING is
// reached, signal(7)) leaves its thread running: the stop must fail, not take the thread as gone.
TEST(WorldStopTest, ASignalThatCannotBeQueuedMakesTheStopFail) {
  if (kWorldStopTsan) GTEST_SKIP() << "ThreadSanitizer's background thread blocks every signal: stops are refused";
  const pid_t child = fork();
  if (child == 0) {  // alone in the child: its limit and its threads are its own
    const rlimit none{0, 0};
    if (setrlimit(RLIMIT_SIGPENDING, &none) != 0) _exit(10);
    std::atomic<bool> stop{false};
    std::atomic<bool> running{false};
    std::thread spinner([&] {
      running = true;
      while (!stop.load()) usleep(100);
    });
    while (!running.load()) usleep(100);
    int rc = 0;
    {
      WorldStop world;
      if (world.StopOthers()) rc = 1;  // the spinner was never parked
    }
    stop = true;
    spinner.join();
    _exit(rc);
  }
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the stop succeeded with a thread not parked";
}

int g_world_stop_program_calls = 0;
void WorldStopProgramHandler(int) { ++g_world_stop_program_calls; }

// A program that uses the same real-time signal for itself keeps it: no stop is made (and the
// program's handler is never called by one), until the program gives the signal back.
TEST(WorldStopTest, AProgramHandlerOnTheSignalMakesTheStopFail) {
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    while (!stop.load()) usleep(100);
  });
  struct sigaction mine {}, before {};
  mine.sa_handler = WorldStopProgramHandler;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(ParkSignal(), &mine, &before), 0);
  const size_t refused = RefusedStops();
  {
    WorldStop world;
    EXPECT_FALSE(world.StopOthers());
  }
  EXPECT_EQ(RefusedStops(), refused + 1);
  EXPECT_EQ(g_world_stop_program_calls, 0);
  struct sigaction now {};
  ASSERT_EQ(sigaction(ParkSignal(), nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, WorldStopProgramHandler);  // left as the program set it
  // SIG_IGN is the program's choice too.
  mine.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(ParkSignal(), &mine, nullptr), 0);
  {
    WorldStop world;
    EXPECT_FALSE(world.StopOthers());
  }
  ASSERT_EQ(sigaction(ParkSignal(), &before, nullptr), 0);
  if (!kWorldStopTsan) {
    WorldStop world;
    EXPECT_TRUE(world.StopOthers());  // the signal given back (or never taken): stops work again
  }
  stop = true;
  spinner.join();
}

}  // namespace
}  // namespace softverbs::fabric
