#include "transport/key_table.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/context.h"
#include "core/mr.h"
#include "fabric/host/pin_line.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

class KeyTableTest : public CoreTest {
 protected:
  std::unique_ptr<Mr> Register(uint32_t access) {
    MrLayout l{reinterpret_cast<uint64_t>(buf_), sizeof(buf_), 0x1000, access};
    return std::move(Mr::Register(*pd_, l).value());
  }
  alignas(4096) uint8_t buf_[256];  // iova 0x1000: the same page offset as the address
};

TEST_F(KeyTableTest, InitiatorsSeeWhatTheOwnerRegistered) {
  auto mr = Register(access::kLocalWrite | access::kRemoteWrite);
  auto pin = transport::KeyPin::Acquire(context_->registry(), mr->rkey());
  ASSERT_TRUE(pin);
  EXPECT_EQ(pin.view().key, mr->rkey());
  EXPECT_EQ(pin.view().addr, reinterpret_cast<uint64_t>(buf_));
  EXPECT_EQ(pin.view().length, sizeof(buf_));
  EXPECT_EQ(pin.view().iova, 0x1000u);
  // (kSharedBacking too when the buffer's pages were moved into a memfd: issue 16.)
  EXPECT_EQ(pin.view().access & ~transport::kSharedBacking, access::kLocalWrite | access::kRemoteWrite);
  EXPECT_EQ(pin.view().pd, pd_->host_id());
  EXPECT_EQ(pin.view().owner_process_slot(), context_->local().slot());
}

// What fabric/host/private_share.h asks before it moves pages: does a live key of this process
// (published, or withdrawn while accesses still hold pins) cover them?
TEST_F(KeyTableTest, OwnKeysTouchSeesPublishedAndPinnedKeys) {
  fabric::HostRegistry& reg = context_->registry();
  const uint64_t at = reinterpret_cast<uint64_t>(buf_);
  EXPECT_FALSE(transport::OwnKeysTouch(reg, at, at + sizeof(buf_)));
  auto mr = Register(access::kRemoteRead);
  EXPECT_TRUE(transport::OwnKeysTouch(reg, at + 100, at + 101));
  EXPECT_TRUE(transport::OwnKeysTouch(reg, at - 4096, at + 1));
  EXPECT_FALSE(transport::OwnKeysTouch(reg, at + sizeof(buf_), at + sizeof(buf_) + 4096));
  EXPECT_FALSE(transport::OwnKeysTouch(reg, at - 4096, at));
  auto pin = transport::KeyPin::Acquire(reg, mr->rkey());
  ASSERT_TRUE(pin);
  std::thread t([&] { mr.reset(); });  // the withdrawal waits for the pin
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(transport::OwnKeysTouch(reg, at, at + 1));  // withdrawn or not yet: a live access
  pin = transport::KeyPin();
  t.join();
  EXPECT_FALSE(transport::OwnKeysTouch(reg, at, at + sizeof(buf_)));
}

TEST_F(KeyTableTest, WrongVariantsAndWithdrawnKeysDoNotPin) {
  auto mr = Register(0);
  uint32_t key = mr->rkey();
  EXPECT_FALSE(transport::KeyPin::Acquire(context_->registry(), key ^ 1));  // stale variant
  EXPECT_FALSE(transport::KeyPin::Acquire(context_->registry(), 0));
  EXPECT_FALSE(transport::KeyPin::Acquire(context_->registry(), 0xffffff00));
  mr.reset();
  EXPECT_FALSE(transport::KeyPin::Acquire(context_->registry(), key));
}

TEST_F(KeyTableTest, DeregistrationWaitsForAccessesInFlight) {
  auto mr = Register(access::kRemoteRead);
  auto pin = transport::KeyPin::Acquire(context_->registry(), mr->rkey());
  ASSERT_TRUE(pin);
  std::atomic<bool> dereg_done{false};
  std::thread t([&] {
    mr.reset();
    dereg_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(dereg_done.load());  // still waiting for our access
  pin = transport::KeyPin();        // the access finishes
  t.join();
  EXPECT_TRUE(dereg_done.load());
}

TEST_F(KeyTableTest, ReregistrationIsSeenAtomically) {
  auto mr = Register(access::kLocalWrite);
  uint8_t other[64];
  MrLayout moved{reinterpret_cast<uint64_t>(other), sizeof(other), 0, access::kLocalWrite | access::kRemoteRead};
  ASSERT_TRUE(mr->Reregister(rereg::kChangeTranslation | rereg::kChangeAccess, nullptr, moved).ok());
  auto pin = transport::KeyPin::Acquire(context_->registry(), mr->rkey());
  ASSERT_TRUE(pin);
  EXPECT_EQ(pin.view().addr, reinterpret_cast<uint64_t>(other));
  EXPECT_EQ(pin.view().length, sizeof(other));
  EXPECT_EQ(pin.view().access, moved.access);
}

// A thread holds a key by announcing it in a hazard line of its own (fabric/host/hazard_lines.h);
// the threads of a process beyond its lines pin on the key's own line instead, and hold the key
// just as well.
TEST_F(KeyTableTest, ThreadsBeyondTheHazardLinesPinOnTheKeysLine) {
  auto mr = Register(access::kRemoteRead);
  const uint32_t rkey = mr->rkey();
  fabric::HostRegistry& reg = context_->registry();
  constexpr int kThreads = fabric::HostRegistry::kHazardLinesPerProcess + 1;
  std::atomic<int> holding{0}, valid{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&] {
      auto pin = transport::KeyPin::Acquire(reg, rkey);
      if (pin) ++valid;
      ++holding;
      while (!release) std::this_thread::yield();
    });
  while (holding < kThreads) std::this_thread::yield();
  EXPECT_EQ(valid.load(), kThreads);
  EXPECT_GE(fabric::PinsHeld(reg.key_pins(transport::KeySlot(rkey))), 1u);
  EXPECT_TRUE(transport::KeyAccessed(reg, transport::KeySlot(rkey)));
  release = true;
  for (auto& t : threads) t.join();
  EXPECT_FALSE(transport::KeyAccessed(reg, transport::KeySlot(rkey)));
}

// Issue 17 item 5: an initiator SIGKILLed while it holds a pin on a key does not stall the
// owner's deregistration -- its pin is recognised as dead, not waited for.
TEST_F(KeyTableTest, DeregistrationDropsThePinsOfAKilledInitiator) {
  auto mr = Register(access::kRemoteWrite | access::kLocalWrite);
  const uint32_t rkey = mr->rkey();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  if (child == 0) {
    // A process of its own on the host (its own process slot), in the middle of an access.
    auto pin = transport::KeyPin::Acquire(context_->registry(), rkey);
    (void)!write(fds[1], pin ? "p" : "n", 1);
    for (;;) pause();
  }
  close(fds[1]);
  pollfd pfd{fds[0], POLLIN, 0};
  const bool answered = poll(&pfd, 1, 10000) == 1;  // bounded: the child is killed either way
  char c = 0;
  if (answered) {
    EXPECT_EQ(read(fds[0], &c, 1), 1);
  }
  close(fds[0]);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(answered) << "the child never pinned";
  ASSERT_EQ(c, 'p');
  const uint64_t cleared = transport::KeyWaits().dead_pins_cleared.load();
  const uint64_t waits = transport::KeyWaits().live_waits.load();
  const uint64_t gave_up = transport::KeyWaits().gave_up.load();
  mr.reset();  // ibv_dereg_mr
  EXPECT_EQ(transport::KeyWaits().dead_pins_cleared.load(), cleared + 1);
  EXPECT_EQ(transport::KeyWaits().live_waits.load(), waits);  // the dead pin was not waited for
  EXPECT_EQ(transport::KeyWaits().gave_up.load(), gave_up);
  // The slot's pin line is clean: the next registration there pays nothing either.
  auto next = Register(access::kRemoteRead);
  next.reset();
  EXPECT_EQ(transport::KeyWaits().live_waits.load(), waits);
}

}  // namespace
}  // namespace softverbs::core
