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
#include "transport/indirect_key.h"
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

// HeldKey (a key kept across accesses): current until the owner publishes, withdraws or
// invalidates it -- then every user of the kept view misses and resolves again.
TEST_F(KeyTableTest, AKeptKeyIsCurrentUntilItsEntryChanges) {
  fabric::HostRegistry& reg = context_->registry();
  auto mr = Register(access::kLocalWrite | access::kRemoteRead);
  transport::HeldKey held;
  EXPECT_FALSE(held.Learn(reg, mr->rkey() ^ 0x1));  // a stale variant names nothing
  EXPECT_EQ(held.key(), 0u);
  ASSERT_TRUE(held.Learn(reg, mr->rkey()));
  EXPECT_TRUE(held.Current());
  EXPECT_EQ(held.view().addr, reinterpret_cast<uint64_t>(buf_));
  EXPECT_EQ(held.seq() % 2, 0u);
  uint8_t other[64];
  MrLayout moved{reinterpret_cast<uint64_t>(other), sizeof(other), 0, 0};
  ASSERT_TRUE(mr->Reregister(rereg::kChangeTranslation, nullptr, moved).ok());  // same key, new place
  EXPECT_FALSE(held.Current()) << "a re-registration must not be used through the old view";
  ASSERT_TRUE(held.Learn(reg, mr->rkey()));
  EXPECT_EQ(held.view().addr, reinterpret_cast<uint64_t>(other));
  EXPECT_TRUE(held.Current());
  ASSERT_TRUE(transport::InvalidateKey(reg, mr->rkey()));  // changes the key, not the count
  EXPECT_FALSE(held.Current());
  auto mr2 = Register(access::kLocalWrite);
  ASSERT_TRUE(held.Learn(reg, mr2->lkey()));
  mr2.reset();  // ibv_dereg_mr
  EXPECT_FALSE(held.Current());
}

// ResolveHeldKey: ResolveKey's rules on the kept view, and the access holds the key as a pin
// of ResolveKey does (a withdrawal waits for it).
TEST_F(KeyTableTest, AKeptKeyResolvesUnderTheSameRulesAndHoldsTheKey) {
  fabric::HostRegistry& reg = context_->registry();
  auto mr = Register(access::kLocalWrite);
  transport::HeldKey held;
  transport::LearnPlainKey(reg, mr->lkey(), &held);
  ASSERT_EQ(held.key(), mr->lkey());
  const uint32_t self = context_->local().slot();
  const transport::KeyRule writes{self, pd_->host_id(), access::kLocalWrite, true};
  {
    transport::PinnedPieces pieces;
    ASSERT_TRUE(transport::ResolveHeldKey(reg, held, mr->lkey(), 0x1010, 16, writes, &pieces));
    ASSERT_EQ(pieces.size(), 1u);
    EXPECT_EQ(pieces.data()[0].iov_base, buf_ + 0x10);
    EXPECT_EQ(pieces.data()[0].iov_len, 16u);
    EXPECT_TRUE(transport::KeyAccessed(reg, transport::KeySlot(mr->lkey())));
    std::atomic<bool> done{false};
    std::thread dereg([&] {
      mr.reset();
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(done.load()) << "ibv_dereg_mr returned while a kept key's access was in flight";
    pieces.Clear();
    dereg.join();
  }
  transport::PinnedPieces none;
  EXPECT_FALSE(transport::ResolveHeldKey(reg, held, held.key(), 0x1010, 16, writes, &none))
      << "a withdrawn key resolved from its kept view";
  auto mr2 = Register(access::kLocalWrite);
  transport::LearnPlainKey(reg, mr2->lkey(), &held);
  EXPECT_FALSE(transport::ResolveHeldKey(reg, held, mr2->lkey(), 0x1000 + sizeof(buf_) - 8, 16, writes, &none));
  const transport::KeyRule other_pd{self, pd_->host_id() + 1, access::kLocalWrite, true};
  EXPECT_FALSE(transport::ResolveHeldKey(reg, held, mr2->lkey(), 0x1000, 16, other_pd, &none));
  const transport::KeyRule remote_read{self, pd_->host_id(), access::kRemoteRead, false};
  EXPECT_FALSE(transport::ResolveHeldKey(reg, held, mr2->lkey(), 0x1000, 16, remote_read, &none));
  EXPECT_EQ(none.size(), 0u);
  EXPECT_FALSE(transport::KeyAccessed(reg, transport::KeySlot(mr2->lkey()))) << "a refusal left the key held";
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
