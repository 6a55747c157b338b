// The scaffolding of the tests of a registry's lines (hazards, pins): a host registry of the test
// alone, and child processes that join it, take what they hold and then wait to be killed.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/host/host_registry.h"

namespace softverbs::fabric::registry_testing {

class RegistryTest : public ::testing::Test {
 protected:
  // `what` names the registry's shared memory object, with this process's pid after it.
  explicit RegistryTest(const std::string& what) : name_("/softverbs-unit-" + what + "-" + std::to_string(getpid())) {
    auto r = HostRegistry::OpenForTesting(name_);
    EXPECT_TRUE(r.ok()) << r.status().rule();
    registry_ = r.value();
  }
  ~RegistryTest() override {
    for (pid_t pid : children_) Reap(pid);
    delete registry_;
    shm_unlink(name_.c_str());
  }
  // A child process with a process slot of its own that runs `hold` in that slot (it takes what
  // it holds) and then waits to be killed; returns its pid once `hold` has returned. The fixture
  // kills it at the end whatever happens.
  pid_t ChildHolding(const std::function<void(uint32_t slot)>& hold, const char* what) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
      auto slot = registry_->processes().Allocate(ProcessToken::Self());
      if (!slot.ok()) _exit(1);
      hold(*slot);
      (void)!write(fds[1], "x", 1);
      for (;;) pause();
    }
    close(fds[1]);
    children_.push_back(pid);
    pollfd pfd{fds[0], POLLIN, 0};
    EXPECT_EQ(poll(&pfd, 1, 10000), 1) << "the child never took " << what;
    char c;
    EXPECT_EQ(read(fds[0], &c, 1), 1);
    close(fds[0]);
    return pid;
  }
  // SIGKILL in the middle of its accesses: it never releases what it holds.
  void Kill(pid_t pid) {
    Reap(pid);
    std::erase(children_, pid);
  }

  std::string name_;
  HostRegistry* registry_ = nullptr;
  std::vector<pid_t> children_;

 private:
  static void Reap(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

}  // namespace softverbs::fabric::registry_testing
