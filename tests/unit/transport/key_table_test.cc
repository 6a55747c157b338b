#include "transport/key_table.h"

#include <thread>

#include <gtest/gtest.h>

#include "core/context.h"
#include "core/mr.h"
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
  EXPECT_EQ(pin.view().access, access::kLocalWrite | access::kRemoteWrite);
  EXPECT_EQ(pin.view().pd, pd_->host_id());
  EXPECT_EQ(pin.view().owner_process_slot(), context_->local().slot());
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

}  // namespace
}  // namespace softverbs::core
