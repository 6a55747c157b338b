// CQ moderation (ibv_modify_cq(3)): the count checked by producers, the period ended by the
// owner's timer (FireIfDue driven by hand here, and the timer thread once), the caps.
#include "core/cq_moderation.h"

#include <poll.h>

#include "base/clock.h"
#include "core/cq.h"
#include "core/device_limits.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

class CqModerationTest : public CoreTest {
 protected:
  void SetUp() override {
    channel_ = std::move(CompChannel::Create(*context_).value());
    cq_ = std::move(Cq::Create(*context_, 64, channel_.get(), 0).value());
  }
  bool Readable(int timeout_ms = 0) {
    pollfd p{channel_->fd(), POLLIN, 0};
    return poll(&p, 1, timeout_ms) == 1;
  }
  std::unique_ptr<CompChannel> channel_;
  std::unique_ptr<Cq> cq_;
};

TEST_F(CqModerationTest, LimitsAreMlx5s) {
  EXPECT_TRUE(cq_->Moderate(DeviceLimits::kMaxCqModCount, DeviceLimits::kMaxCqModPeriodUs).ok());
  EXPECT_EQ(cq_->Moderate(0, DeviceLimits::kMaxCqModPeriodUs + 1).code(), EINVAL);
  EXPECT_EQ(cq_->Moderate(DeviceLimits::kMaxCqModCount + 1, 0).code(), EINVAL);
}

TEST_F(CqModerationTest, TheCountHoldsTheEventNotTheCompletions) {
  ASSERT_TRUE(cq_->Moderate(3, 0).ok());
  ASSERT_TRUE(cq_->RequestNotify(false).ok());
  ASSERT_TRUE(cq_->Push(Completion{}));
  ASSERT_TRUE(cq_->Push(Completion{}));
  EXPECT_FALSE(Readable());
  Completion out[4];
  EXPECT_EQ(cq_->Poll(out, 4), 2);  // polling is not delayed
  EXPECT_EQ(cq_->FireIfDue(DeviceClockNow() + 3600'000'000'000ull), 0u);  // no period: only the count ends it
  EXPECT_FALSE(Readable());
  ASSERT_TRUE(cq_->Push(Completion{}));
  EXPECT_TRUE(Readable());
  ASSERT_TRUE(channel_->Wait().ok());
  cq_->AckEvents(1);
  // Fired: not armed any more.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cq_->Push(Completion{}));
  EXPECT_FALSE(Readable());
}

TEST_F(CqModerationTest, SolicitedArmingCountsOnlyWhatWouldFireIt) {
  ASSERT_TRUE(cq_->Moderate(2, 0).ok());
  ASSERT_TRUE(cq_->RequestNotify(true).ok());
  Completion solicited;
  solicited.solicited = true;
  ASSERT_TRUE(cq_->Push(solicited));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(cq_->Push(Completion{}));  // unsolicited: not counted
  EXPECT_FALSE(Readable());
  ASSERT_TRUE(cq_->Push(solicited));
  EXPECT_TRUE(Readable());
}

TEST_F(CqModerationTest, ThePeriodEndsAWaitAtItsDeadline) {
  ASSERT_TRUE(cq_->Moderate(100, 50).ok());
  ASSERT_TRUE(cq_->RequestNotify(false).ok());
  EXPECT_EQ(cq_->FireIfDue(DeviceClockNow()), 0u);  // nothing waits yet
  const uint64_t before = DeviceClockNow();
  ASSERT_TRUE(cq_->Push(Completion{}));
  const uint64_t after = DeviceClockNow();
  // Either the timer thread already ended it, or it ends 50 us after the completion.
  const uint64_t due = cq_->FireIfDue(before);
  if (due != 0) {
    EXPECT_GE(due, before + 50'000);
    EXPECT_LE(due, after + 50'000);
    EXPECT_EQ(cq_->FireIfDue(due), 0u);
  }
  EXPECT_TRUE(Readable(5000));
}

TEST_F(CqModerationTest, TheTimerThreadFiresWithoutAnotherCompletion) {
  ASSERT_TRUE(cq_->Moderate(1000, 200).ok());
  ASSERT_TRUE(cq_->RequestNotify(false).ok());
  ASSERT_TRUE(cq_->Push(Completion{}));
  EXPECT_TRUE(Readable(5000));  // a bound, not a timing: the thread woke and fired
}

TEST_F(CqModerationTest, LoweringTheLimitsReleasesAWaitingEvent) {
  ASSERT_TRUE(cq_->Moderate(10, 0).ok());
  ASSERT_TRUE(cq_->RequestNotify(false).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(cq_->Push(Completion{}));
  EXPECT_FALSE(Readable());
  ASSERT_TRUE(cq_->Moderate(5, 0).ok());  // still above the 4 waiting
  EXPECT_FALSE(Readable());
  ASSERT_TRUE(cq_->Moderate(0, 0).ok());  // moderation off
  EXPECT_TRUE(Readable());
}

}  // namespace
}  // namespace softverbs::core
