#include <set>

#include "core/ah.h"
#include "core/device_limits.h"
#include "core/srq.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

class SrqTest : public CoreTest {};

TEST_F(SrqTest, CreateChecksSizesAndIgnoresTheLimit) {
  SrqAttributes zero{0, 1, 0};
  EXPECT_EQ(Srq::Create(*pd_, zero).status().code(), EINVAL);
  SrqAttributes big{DeviceLimits::kMaxSrqWr + 1, 1, 0};
  EXPECT_EQ(Srq::Create(*pd_, big).status().code(), EINVAL);
  SrqAttributes sges{16, DeviceLimits::kMaxSrqSge + 1, 0};
  EXPECT_EQ(Srq::Create(*pd_, sges).status().code(), EINVAL);
  SrqAttributes ok{16, 2, 7};
  auto srq = Srq::Create(*pd_, ok);
  ASSERT_TRUE(srq.ok());
  EXPECT_EQ((*srq)->Query().srq_limit, 0u);  // ibv_create_srq(3): srq_limit is ignored
  EXPECT_GE((*srq)->Query().max_wr, 16u);
}

TEST_F(SrqTest, ModifyChecksAllBeforeApplying) {
  SrqAttributes a{16, 2, 0};
  auto srq = std::move(Srq::Create(*pd_, a).value());
  EXPECT_EQ(srq->Modify({0, 0, 20}, srq_attr::kLimit).code(), EINVAL);  // above max_wr
  EXPECT_TRUE(srq->Modify({32, 0, 20}, srq_attr::kLimit | srq_attr::kMaxWr).ok());
  EXPECT_EQ(srq->Query().max_wr, 32u);
  EXPECT_EQ(srq->Query().srq_limit, 20u);
  EXPECT_EQ(srq->Modify({4, 0, 2}, srq_attr::kMaxWr | srq_attr::kLimit | 0x10).code(), EINVAL);
  EXPECT_TRUE(srq->Modify({4, 0, 2}, 0).ok());  // mask 0: nothing to change
  EXPECT_EQ(srq->Query().max_wr, 32u);
}

TEST_F(SrqTest, SrqNumbersAreUnique) {
  std::set<uint32_t> seen;
  std::vector<std::unique_ptr<Srq>> srqs;
  for (int i = 0; i < 100; ++i) {
    SrqAttributes a{4, 1, 0};
    auto s = Srq::Create(*pd_, a);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(seen.insert((*s)->srq_num()).second);
    srqs.push_back(std::move(s.value()));
  }
}

class AhTest : public CoreTest {
 protected:
  AddressVector Good() {
    AddressVector av;
    av.is_global = true;
    av.port_num = 1;
    av.sgid_index = 1;
    av.dgid = context_->gids().at(1).gid;
    return av;
  }
};

TEST_F(AhTest, RoceRulesApply) {
  EXPECT_TRUE(Ah::Create(*pd_, Good()).ok());
  AddressVector no_grh = Good();
  no_grh.is_global = false;
  EXPECT_EQ(Ah::Create(*pd_, no_grh).status().rule(), "RoCE requires a GRH: ah_attr.is_global must be 1");
  AddressVector port0 = Good();
  port0.port_num = 0;  // an AH names its port; only modify_qp may say "the QP's port"
  EXPECT_EQ(Ah::Create(*pd_, port0).status().code(), EINVAL);
  AddressVector empty_gid = Good();
  empty_gid.sgid_index = DeviceLimits::kGidTableLen - 1;
  EXPECT_EQ(Ah::Create(*pd_, empty_gid).status().code(), EINVAL);
  AddressVector zero_dgid = Good();
  zero_dgid.dgid = Gid{};
  EXPECT_EQ(Ah::Create(*pd_, zero_dgid).status().code(), EINVAL);
  AddressVector rate = Good();
  rate.static_rate = 25;  // IBV_RATE_1200_GBPS (24) is the last rate
  EXPECT_EQ(Ah::Create(*pd_, rate).status().code(), EINVAL);
}

TEST_F(AhTest, GidTableStartsWithLinkLocalThenLoopback) {
  GidTable t = context_->gids();
  EXPECT_EQ(t.at(0).gid[0], 0xfe);
  EXPECT_EQ(t.at(0).gid[1], 0x80);
  EXPECT_TRUE(t.at(0).valid);
  const Gid loopback4{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_GE(t.Find(loopback4), 1);
  EXPECT_FALSE(t.at(DeviceLimits::kGidTableLen - 1).valid);
  EXPECT_EQ(t.at(DeviceLimits::kGidTableLen - 1).gid, Gid{});
  EXPECT_EQ(t.valid_mask() & 1, 1u);
}

}  // namespace
}  // namespace softverbs::core
