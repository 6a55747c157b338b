// The pacer's decisions (transport/pacer.h) against a clock the test moves: which message may
// leave when. No wall-clock time is read or asserted.
#include "transport/pacer.h"

#include <gtest/gtest.h>

#include <chrono>

namespace softverbs::transport {
namespace {

using std::chrono::microseconds;
using std::chrono::nanoseconds;

// 8000 kbps is 1,000,000 bytes/s: one byte per microsecond.
constexpr uint32_t kBytePerUs = 8000;

class PacerTest : public ::testing::Test {
 protected:
  Pacer::TimePoint t0_ = Pacer::TimePoint{} + std::chrono::hours(1);
};

TEST_F(PacerTest, UnlimitedAlwaysAllows) {
  Pacer p;
  EXPECT_FALSE(p.limited());
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(p.MayGo(1 << 20, t0_));
    p.Take(1 << 20, t0_);
  }
}

TEST_F(PacerTest, CostFollowsTheRate) {
  Pacer p;
  p.Configure(kBytePerUs, 100);
  EXPECT_EQ(p.CostOf(100), microseconds(100));
  p.Configure(kBytePerUs * 2, 100);
  EXPECT_EQ(p.CostOf(100), microseconds(50));
  p.Configure(1, 100);  // 1 kbps: 8 ms per byte
  EXPECT_EQ(p.CostOf(1), std::chrono::milliseconds(8));
  p.Configure(100000000, 4096);  // the device's maximum: no overflow at 2^31 bytes
  EXPECT_EQ(p.CostOf(1ull << 31), nanoseconds((1ull << 31) * 8000000ull / 100000000));
}

TEST_F(PacerTest, ABurstLeavesAtOnceThenTheRateHolds) {
  Pacer p;
  p.Configure(kBytePerUs, 300);  // a bucket of 300 bytes, full
  // Three 100-byte messages empty it; the fourth waits until it holds 100 bytes again.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(p.MayGo(100, t0_)) << i;
    p.Take(100, t0_);
  }
  EXPECT_FALSE(p.MayGo(100, t0_));
  EXPECT_EQ(p.ReadyAt(100), t0_ + microseconds(100));
  EXPECT_FALSE(p.MayGo(100, t0_ + microseconds(100) - nanoseconds(1)));
  EXPECT_TRUE(p.MayGo(100, t0_ + microseconds(100)));
  // A smaller message needs fewer bytes: 10 of them are there after 10 us.
  EXPECT_TRUE(p.MayGo(10, t0_ + microseconds(10)));
  EXPECT_FALSE(p.MayGo(11, t0_ + microseconds(10)));
  // Sent at its first moment, the next 100 bytes wait another 100 us: 1 byte per us.
  p.Take(100, t0_ + microseconds(100));
  EXPECT_EQ(p.ReadyAt(100), t0_ + microseconds(200));
}

TEST_F(PacerTest, AMessageLongerThanTheBurstWaitsForAFullBucketAndLeavesADebt) {
  Pacer p;
  p.Configure(kBytePerUs, 100);
  ASSERT_TRUE(p.MayGo(10000, t0_));  // full: it leaves whole
  p.Take(10000, t0_);                // 10 ms at the rate
  // The bucket is 9900 bytes in debt: a 1-byte message waits 9901 us, another long one 10 ms.
  EXPECT_EQ(p.ReadyAt(1), t0_ + microseconds(9901));
  EXPECT_EQ(p.ReadyAt(10000), t0_ + microseconds(10000));
  EXPECT_FALSE(p.MayGo(10000, t0_ + microseconds(9999)));
  EXPECT_TRUE(p.MayGo(10000, t0_ + microseconds(10000)));
}

TEST_F(PacerTest, AnEmptyMessageWaitsOnlyForADebt) {
  Pacer p;
  p.Configure(kBytePerUs, 100);
  p.Take(100, t0_);
  EXPECT_TRUE(p.MayGo(0, t0_));  // (an RDMA READ request: no payload)
  p.Take(300, t0_);              // 300 bytes in debt
  EXPECT_FALSE(p.MayGo(0, t0_ + microseconds(299)));
  EXPECT_TRUE(p.MayGo(0, t0_ + microseconds(300)));
}

TEST_F(PacerTest, IdleTimeBuysNoMoreThanOneBurst) {
  Pacer p;
  p.Configure(kBytePerUs, 200);
  p.Take(200, t0_);
  // An hour later the bucket is full, not an hour's worth of bytes.
  const Pacer::TimePoint later = t0_ + std::chrono::hours(1);
  ASSERT_TRUE(p.MayGo(200, later));
  p.Take(200, later);
  EXPECT_FALSE(p.MayGo(1, later));
}

TEST_F(PacerTest, TheSameConfigurationKeepsTheBucketANewOneRefillsIt) {
  Pacer p;
  p.Configure(kBytePerUs, 100);
  p.Take(100, t0_);
  ASSERT_FALSE(p.MayGo(100, t0_));
  p.Configure(kBytePerUs, 100);  // ibv_modify_qp of another attribute
  EXPECT_FALSE(p.MayGo(100, t0_));
  p.Configure(kBytePerUs * 2, 100);  // a new rate
  EXPECT_TRUE(p.MayGo(100, t0_));
  p.Configure(0, 0);  // unlimited again
  EXPECT_TRUE(p.MayGo(1 << 30, t0_));
}

}  // namespace
}  // namespace softverbs::transport
