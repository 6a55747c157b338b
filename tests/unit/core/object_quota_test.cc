// The device limits max_pd, max_cq and max_ah are enforced (issue 17 item 7): the object past the
// limit is refused with ENOMEM and a rule naming the limit, and a destroyed object gives its unit
// back. The limits are injected small here: creating 65536 CQs would only make the test slow.
#include "core/object_quota.h"

#include <memory>
#include <thread>
#include <vector>

#include "core/ah.h"
#include "core/cq.h"
#include "core/device_limits.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

class ObjectQuotaTest : public CoreTest {
 protected:
  // Lets `room` more objects of `kind` exist; restores the device limit afterwards.
  void Limit(QuotaKind kind, uint32_t room) {
    kind_ = kind;
    saved_ = SetQuotaLimitForTesting(kind, QuotaInUse(kind) + room);
  }
  ~ObjectQuotaTest() override {
    if (saved_ != 0) SetQuotaLimitForTesting(kind_, saved_);
  }
  AddressVector Av() {
    AddressVector av;
    av.is_global = true;
    av.port_num = 1;
    av.sgid_index = 1;
    av.dgid = context_->gids().at(1).gid;
    return av;
  }
  template <typename T>
  static void ExpectLimit(const Result<T>& r, const std::string& limit) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ENOMEM);
    EXPECT_NE(r.status().rule().find("the device limit " + limit), std::string::npos) << r.status().rule();
  }
  QuotaKind kind_ = QuotaKind::kPd;
  uint32_t saved_ = 0;
};

TEST_F(ObjectQuotaTest, TheDeviceLimitsAreTheAdvertisedOnes) {
  // Nothing was injected yet: a unit is refused only past the advertised value.
  EXPECT_EQ(SetQuotaLimitForTesting(QuotaKind::kCq, DeviceLimits::kMaxCq), DeviceLimits::kMaxCq);
  EXPECT_EQ(SetQuotaLimitForTesting(QuotaKind::kPd, DeviceLimits::kMaxPd), DeviceLimits::kMaxPd);
  EXPECT_EQ(SetQuotaLimitForTesting(QuotaKind::kAh, DeviceLimits::kMaxAh), DeviceLimits::kMaxAh);
}

TEST_F(ObjectQuotaTest, CqsBeyondMaxCqAreRefusedUntilOneIsDestroyed) {
  Limit(QuotaKind::kCq, 3);
  std::vector<std::unique_ptr<Cq>> cqs;
  for (int i = 0; i < 3; ++i) {
    auto cq = Cq::Create(*context_, 4, nullptr, 0);
    ASSERT_TRUE(cq.ok()) << cq.status().rule();
    cqs.push_back(std::move(cq.value()));
  }
  ExpectLimit(Cq::Create(*context_, 4, nullptr, 0), "max_cq");
  cqs.pop_back();  // ibv_destroy_cq gives the unit back
  EXPECT_TRUE(Cq::Create(*context_, 4, nullptr, 0).ok());
}

TEST_F(ObjectQuotaTest, PdsBeyondMaxPdAreRefused) {
  Limit(QuotaKind::kPd, 2);
  auto a = Pd::Create(*context_);
  auto b = Pd::Create(*context_);
  ASSERT_TRUE(a.ok() && b.ok());
  ExpectLimit(Pd::Create(*context_), "max_pd");
  a.value().reset();
  EXPECT_TRUE(Pd::Create(*context_).ok());
}

TEST_F(ObjectQuotaTest, AhsBeyondMaxAhAreRefusedAndTheirPdIsNotHeld) {
  Limit(QuotaKind::kAh, 1);
  auto ah = Ah::Create(*pd_, Av());
  ASSERT_TRUE(ah.ok()) << ah.status().rule();
  ExpectLimit(Ah::Create(*pd_, Av()), "max_ah");
  EXPECT_EQ(pd_->users().count(), 1);  // the refused AH holds nothing
  ah.value().reset();
  EXPECT_TRUE(Ah::Create(*pd_, Av()).ok());
}

TEST_F(ObjectQuotaTest, ConcurrentTakersNeverExceedTheLimit) {
  Limit(QuotaKind::kAh, 100);
  std::vector<QuotaHold> held[4];
  std::vector<std::thread> threads;
  for (auto& h : held) {
    threads.emplace_back([&h] {
      for (int i = 0; i < 100; ++i) {
        auto t = QuotaHold::Take(QuotaKind::kAh);
        if (t.ok()) h.push_back(std::move(t.value()));
      }
    });
  }
  for (auto& t : threads) t.join();
  size_t total = 0;
  for (auto& h : held) total += h.size();
  EXPECT_EQ(total, 100u);
}

}  // namespace
}  // namespace softverbs::core
