#include "fabric/host/pin_line.h"

#include <sys/types.h>

#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/fabric/host/registry_fixture.h"

namespace softverbs::fabric {
namespace {

// A registry of this test alone, and a child process that joins it (a process slot), takes
// `pins` pins on line 0 and then waits to be killed.
class PinLineTest : public registry_testing::RegistryTest {
 protected:
  PinLineTest() : RegistryTest("pins") {}
  PinLine& line() { return registry_->key_pins(0); }

  // A child holding `pins` pins of its own; returns its pid once they are taken.
  pid_t ChildPinning(int pins) {
    return ChildHolding(
        [&](uint32_t slot) {
          uint32_t me = PinnerId(slot, registry_->processes().slot(slot).generation.load());
          for (int i = 0; i < pins; ++i) Pin(*registry_, line(), me);
        },
        "its pins");
  }
};

TEST_F(PinLineTest, PinsOfAKilledProcessAreDroppedWithoutWaiting) {
  pid_t child = ChildPinning(3);
  EXPECT_EQ(PinsHeld(line()), 3u);
  Kill(child);  // SIGKILL in the middle of its accesses: it never unpins
  PinWait w = WaitUnpinned(*registry_, line(), "test line");
  EXPECT_EQ(w.dead_cleared, 3u);
  EXPECT_FALSE(w.waited);  // recognised as dead at the first look
  EXPECT_FALSE(w.gave_up);
  EXPECT_EQ(PinsHeld(line()), 0u);
}

TEST_F(PinLineTest, LivePinsAreWaitedForAndDeadOnesAreNotCountedWithThem) {
  pid_t dead = ChildPinning(2);
  ChildPinning(1);  // stays alive (its pin is never released: the wait gives up)
  Kill(dead);
  PinWait w = WaitUnpinned(*registry_, line(), "test line", /*limit_ms=*/20);
  EXPECT_EQ(w.dead_cleared, 2u);
  EXPECT_TRUE(w.waited);
  EXPECT_TRUE(w.gave_up);
}

TEST_F(PinLineTest, OwnPinsAreCountedAndReleased) {
  auto slot = registry_->processes().Allocate(ProcessToken::Self());
  ASSERT_TRUE(slot.ok());
  uint32_t me = PinnerId(*slot, registry_->processes().slot(*slot).generation.load());
  auto* a = Pin(*registry_, line(), me);
  auto* b = Pin(*registry_, line(), me);
  EXPECT_EQ(a, b);  // one word per process
  EXPECT_EQ(PinsHeld(line()), 2u);
  EXPECT_EQ(ClearDeadPins(*registry_, line()), 0u);  // ours are alive
  Unpin(a, me);
  Unpin(b, me);
  EXPECT_EQ(PinsHeld(line()), 0u);
  PinWait w = WaitUnpinned(*registry_, line(), "test line");
  EXPECT_FALSE(w.waited);
}

TEST_F(PinLineTest, APinnerFindingTheLineFullOfDeadPinsTakesTheirPlace) {
  std::vector<pid_t> dead;
  for (int i = 0; i < PinLine::kWords; ++i) dead.push_back(ChildPinning(1));
  for (pid_t pid : dead) Kill(pid);
  EXPECT_EQ(PinsHeld(line()), static_cast<uint32_t>(PinLine::kWords));
  auto slot = registry_->processes().Allocate(ProcessToken::Self());
  ASSERT_TRUE(slot.ok());
  uint32_t me = PinnerId(*slot, registry_->processes().slot(*slot).generation.load());
  auto* w = Pin(*registry_, line(), me);  // would spin forever if dead words were never cleared
  EXPECT_EQ(PinsHeld(line()), 1u);
  Unpin(w, me);
}

TEST_F(PinLineTest, APinnerWhoseSlotWentToAnotherProcessIsDead) {
  auto slot = registry_->processes().Allocate(ProcessToken::Self());
  ASSERT_TRUE(slot.ok());
  uint32_t old_id = PinnerId(*slot, registry_->processes().slot(*slot).generation.load());
  ASSERT_TRUE(registry_->processes().Free(*slot, ProcessToken::Self()));
  EXPECT_FALSE(PinnerAlive(*registry_, old_id));  // slot free
  EXPECT_TRUE(PinnerAlive(*registry_, kAnonymousPinner));
}

}  // namespace
}  // namespace softverbs::fabric
