#include "fabric/host/hazard_lines.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "tests/unit/fabric/host/registry_fixture.h"

namespace softverbs::fabric {
namespace {

uint32_t HazardTestTid() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

// A registry of this test alone. Lines are used directly (ThisThreadHazards needs the process's
// own registry): a process slot is taken for this process, as LocalProcess does.
class HazardLinesTest : public registry_testing::RegistryTest {
 protected:
  HazardLinesTest() : RegistryTest("hazards") {
    auto slot = registry_->processes().Allocate(ProcessToken::Self());
    EXPECT_TRUE(slot.ok());
    slot_ = *slot;
  }
  HazardLine& Line(uint32_t i, uint32_t tid) {
    HazardLine& l = registry_->hazards(slot_)[i];
    l.tid.store(tid);
    return l;
  }
  // A child process with a slot of its own announcing `value`; returns once it has.
  pid_t ChildAnnouncing(uint32_t value) {
    return ChildHolding(
        [&](uint32_t slot) {
          HazardLine& l = registry_->hazards(slot)[0];
          l.tid.store(HazardTestTid());
          Announce(l, value);
        },
        "its announcement");
  }

  uint32_t slot_ = 0;
};

TEST_F(HazardLinesTest, AnnouncedUntilRetracted) {
  HazardLine& l = Line(0, 1);
  EXPECT_FALSE(Announced(*registry_, 7));
  std::atomic<uint32_t>* e = Announce(l, 7);
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(Announced(*registry_, 7));
  EXPECT_FALSE(Announced(*registry_, 8));
  Retract(e);
  EXPECT_FALSE(Announced(*registry_, 7));
}

TEST_F(HazardLinesTest, AFullLineRefusesAnotherAnnouncement) {
  HazardLine& l = Line(0, 1);
  for (int i = 0; i < HazardLine::kEntries; ++i) ASSERT_NE(Announce(l, 100 + i), nullptr);
  EXPECT_EQ(Announce(l, 99), nullptr);  // the caller pins on the key's line instead
}

TEST_F(HazardLinesTest, TheCallersOwnAnnouncementIsNotWaitedFor) {
  // Its own accesses are sequenced with its withdrawal: waiting would never end.
  HazardLine& l = Line(0, HazardTestTid());
  Announce(l, 5);
  const PinWait w = WaitUnannounced(*registry_, 5, "test", 2000);
  EXPECT_FALSE(w.waited);
  EXPECT_FALSE(w.gave_up);
}

TEST_F(HazardLinesTest, AnotherThreadsAnnouncementIsWaitedForUntilRetracted) {
  std::atomic<bool> announced{false}, retracted{false};
  std::thread t([&] {
    HazardLine& l = Line(1, HazardTestTid());
    std::atomic<uint32_t>* e = Announce(l, 9);
    announced = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    retracted = true;
    Retract(e);
  });
  while (!announced) std::this_thread::yield();
  const PinWait w = WaitUnannounced(*registry_, 9, "test", 10000);
  t.join();
  EXPECT_TRUE(retracted);
  EXPECT_TRUE(w.waited);
  EXPECT_FALSE(w.gave_up);
  EXPECT_FALSE(Announced(*registry_, 9));
}

TEST_F(HazardLinesTest, ADeadProcesssAnnouncementIsDroppedWithoutWaiting) {
  pid_t child = ChildAnnouncing(11);
  EXPECT_TRUE(Announced(*registry_, 11));
  Kill(child);
  const PinWait w = WaitUnannounced(*registry_, 11, "test", 10000);
  EXPECT_EQ(w.dead_cleared, 1u);
  EXPECT_FALSE(w.waited);
  EXPECT_FALSE(Announced(*registry_, 11));
}

TEST_F(HazardLinesTest, AStoppedProcessIsWaitedForUntilTheTestsLimit) {
  pid_t child = ChildAnnouncing(13);
  kill(child, SIGSTOP);
  const PinWait w = WaitUnannounced(*registry_, 13, "test", 200);
  EXPECT_TRUE(w.waited);
  EXPECT_TRUE(w.gave_up);  // only because of the limit: without one it waits on
  EXPECT_EQ(w.dead_cleared, 0u);
  EXPECT_FALSE(Announced(*registry_, 13));
}

}  // namespace
}  // namespace softverbs::fabric
