// The watch raises a peer's flag when its process exits (fabric/host/death_watch.h), and
// Peer::AliveRecently answers from it.
#include "fabric/host/death_watch.h"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "fabric/host/host_directory.h"
#include "fabric/host/peer_process.h"
#include "fabric/host/process_token.h"

namespace softverbs::fabric {
namespace {

// A child that lives until its pipe is closed.
struct WatchedChild {
  pid_t pid = -1;
  int release = -1;
  WatchedChild() {
    int p[2];
    if (pipe(p) != 0) return;
    pid = fork();
    if (pid == 0) {
      close(p[1]);
      char c;
      (void)!read(p[0], &c, 1);
      _exit(0);
    }
    close(p[0]);
    release = p[1];
  }
  void Exit() {
    close(release);
    int status;
    waitpid(pid, &status, 0);
  }
};

// Waits (bounded) for `f` to hold; the watch runs on its own thread.
template <typename F>
bool Eventually(F f) {
  for (int i = 0; i < 5000 && !f(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return f();
}

TEST(DeathWatchTest, RaisesTheFlagWhenTheProcessExits) {
  WatchedChild child;
  ASSERT_GT(child.pid, 0);
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, child.pid, 0));
  if (pidfd < 0) GTEST_SKIP() << "no pidfd_open here";
  auto dead = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE(WatchDeath(pidfd, dead));
  close(pidfd);  // (the watch keeps its own descriptor)
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(dead->load());  // alive: not raised
  child.Exit();
  EXPECT_TRUE(Eventually([&] { return dead->load(); }));
}

TEST(DeathWatchTest, RefusesWhatItCannotWatch) {
  auto dead = std::make_shared<std::atomic<bool>>(false);
  EXPECT_FALSE(WatchDeath(-1, dead));
  EXPECT_FALSE(dead->load());
}

// A peer reached with and without a pidfd: both see the exit (the watched one from the flag,
// the other from its clock and poll).
TEST(DeathWatchTest, PeerAliveRecentlyFollowsTheExit) {
  for (auto use : {PeerProcess::Pidfd::kIfAvailable, PeerProcess::Pidfd::kNever}) {
    WatchedChild child;
    ASSERT_GT(child.pid, 0);
    auto process = PeerProcess::Open(ProcessToken::Of(child.pid), use);
    ASSERT_TRUE(process.ok()) << process.status().rule();
    Peer peer(0, std::move(process.value()));
    EXPECT_TRUE(peer.AliveRecently());
    child.Exit();
    EXPECT_TRUE(Eventually([&] { return !peer.AliveRecently(); }));
  }
}

// After fork() the child watches its own peers (the parent's watch thread is not in it).
TEST(DeathWatchTest, AForkedChildWatchesItsOwnPeers) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer starts no thread in a forked child: such a child uses the clock";
#endif
  WatchedChild warm;  // the parent's watch is started
  ASSERT_GT(warm.pid, 0);
  const int warm_fd = static_cast<int>(syscall(SYS_pidfd_open, warm.pid, 0));
  if (warm_fd < 0) GTEST_SKIP() << "no pidfd_open here";
  ASSERT_TRUE(WatchDeath(warm_fd, std::make_shared<std::atomic<bool>>(false)));
  close(warm_fd);
  const pid_t tester = fork();
  if (tester == 0) {
    WatchedChild grandchild;
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, grandchild.pid, 0));
    auto dead = std::make_shared<std::atomic<bool>>(false);
    if (fd < 0 || !WatchDeath(fd, dead)) _exit(2);
    grandchild.Exit();
    _exit(Eventually([&] { return dead->load(); }) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(tester, &status, 0), tester);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  warm.Exit();
}

}  // namespace
}  // namespace softverbs::fabric
