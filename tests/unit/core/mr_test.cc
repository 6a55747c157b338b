#include "core/mr.h"

#include <sys/mman.h>

#include <set>
#include <vector>

#include "core/device_limits.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

class MrTest : public CoreTest {
 protected:
  MrLayout Layout(uint32_t access) {
    return {reinterpret_cast<uint64_t>(buf_.data()), buf_.size(), reinterpret_cast<uint64_t>(buf_.data()), access};
  }
  static int Errno(const Result<std::unique_ptr<Mr>>& r) { return r.ok() ? 0 : r.status().code(); }
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(10000);
};

TEST_F(MrTest, AccessFlagsFollowIbvRegMr) {
  using namespace access;
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(0))), 0);
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic))), 0);
  // ibv_reg_mr(3): remote write or atomic need local write.
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(kRemoteWrite))), EINVAL);
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(kRemoteAtomic | kRemoteRead))), EINVAL);
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(kRemoteRead))), 0);
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(kMwBind))), 0);  // memory windows may bind to it
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(kOnDemand))), 0);  // ODP: core/mr.h
  // Optional-range bits are hints a device may ignore; bits beyond it are invalid.
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(kRelaxedOrdering | (1u << 25)))), 0);
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(1u << 12))), EINVAL);
  EXPECT_EQ(Errno(Mr::Register(*pd_, Layout(1u << 31))), EINVAL);
}

TEST_F(MrTest, LayoutMustBeMappedAndNonEmpty) {
  MrLayout zero = Layout(0);
  zero.length = 0;
  EXPECT_EQ(Errno(Mr::Register(*pd_, zero)), EINVAL);
  MrLayout huge = Layout(0);
  huge.length = DeviceLimits::kMaxMrSize + 1;
  EXPECT_EQ(Errno(Mr::Register(*pd_, huge)), EINVAL);
  // A range with a hole: map 3 pages, unmap the middle one.
  long page = sysconf(_SC_PAGESIZE);
  auto* p = static_cast<uint8_t*>(mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(munmap(p + page, page), 0);
  const uint64_t at = reinterpret_cast<uint64_t>(p + 10);
  MrLayout hole{at, static_cast<uint64_t>(3 * page - 20), at, 0};
  EXPECT_EQ(Errno(Mr::Register(*pd_, hole)), EFAULT);
  MrLayout first{at, static_cast<uint64_t>(page - 10), at, 0};
  EXPECT_EQ(Errno(Mr::Register(*pd_, first)), 0);
  munmap(p, page);
  munmap(p + 2 * page, page);
}

// Issue 13 item 2: an ODP MR pins nothing, so a range not mapped yet registers; the implicit
// MR (NULL, SIZE_MAX) covers every address and needs ON_DEMAND and iova 0 (mlx5).
TEST_F(MrTest, OnDemandRegistersUnmappedRangesAndImplicit) {
  long page = sysconf(_SC_PAGESIZE);
  auto* p = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(munmap(p, 2 * page), 0);
  const uint64_t at = reinterpret_cast<uint64_t>(p);
  EXPECT_EQ(Errno(Mr::Register(*pd_, MrLayout{at, static_cast<uint64_t>(2 * page), at, access::kLocalWrite})), EFAULT);
  EXPECT_EQ(Errno(Mr::Register(*pd_, MrLayout{at, static_cast<uint64_t>(2 * page), at,
                                              access::kLocalWrite | access::kOnDemand})), 0);
  const uint32_t odp = access::kLocalWrite | access::kRemoteWrite | access::kOnDemand;
  auto implicit = Mr::Register(*pd_, MrLayout{0, UINT64_MAX, 0, odp});
  ASSERT_TRUE(implicit.ok()) << implicit.status().rule();
  EXPECT_TRUE(IsImplicit((*implicit)->layout()));
  EXPECT_EQ(Errno(Mr::Register(*pd_, MrLayout{0, UINT64_MAX, 0, access::kLocalWrite})), EINVAL);
  EXPECT_EQ(Errno(Mr::Register(*pd_, MrLayout{0, UINT64_MAX, 0x1000, odp})), EINVAL);
}

// ibv_advise_mr(3) checked as mlx5_ib_advise_mr: advice, flags, keys, then (FLUSH) the range.
TEST_F(MrTest, AdviseChecksKeysRangesAndAdvice) {
  const uint64_t at = reinterpret_cast<uint64_t>(buf_.data());
  auto odp = Mr::Register(*pd_, MrLayout{at, buf_.size(), at, access::kOnDemand});
  auto plain = Mr::Register(*pd_, MrLayout{at, buf_.size(), at, access::kLocalWrite});
  ASSERT_TRUE(odp.ok() && plain.ok());
  const uint32_t key = (*odp)->lkey();
  AdviseRange in{at + 8, 100, key};
  EXPECT_EQ(AdviseMr(*pd_, 0, kAdviseFlush, &in, 1).code(), 0);
  EXPECT_EQ(AdviseMr(*pd_, 2, 0, &in, 1).code(), 0);
  EXPECT_EQ(AdviseMr(*pd_, 3, 0, &in, 1).code(), EOPNOTSUPP);
  EXPECT_EQ(AdviseMr(*pd_, 0, 2, &in, 1).code(), EINVAL);
  EXPECT_EQ(AdviseMr(*pd_, 0, 0, &in, 0).code(), EINVAL);
  EXPECT_EQ(AdviseMr(*pd_, 1, 0, &in, 1).code(), EINVAL);  // PREFETCH_WRITE on a read-only ODP MR
  AdviseRange non_odp{at, 8, (*plain)->lkey()};
  EXPECT_EQ(AdviseMr(*pd_, 0, 0, &non_odp, 1).code(), EINVAL);
  AdviseRange unknown{at, 8, 0x7fffff00};
  EXPECT_EQ(AdviseMr(*pd_, 0, kAdviseFlush, &unknown, 1).code(), EINVAL);
  AdviseRange beyond{at + buf_.size() - 4, 8, key};
  EXPECT_EQ(AdviseMr(*pd_, 0, kAdviseFlush, &beyond, 1).code(), EFAULT);
  EXPECT_EQ(AdviseMr(*pd_, 0, 0, &beyond, 1).code(), 0);  // dropped, as mlx5's deferred prefetch
}

// Issue 17 item 12: ib_uverbs_reg_mr refuses an iova whose page offset differs from the
// address's (EINVAL); any other iova is the application's choice (ibv_reg_mr_iova(3)).
TEST_F(MrTest, IovaMustKeepThePageOffsetOfTheAddress) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  MrLayout l = Layout(access::kLocalWrite);
  const uint64_t offset = l.addr & (page - 1);
  l.iova = 0x7000000000 + offset;  // another page, same offset
  auto mr = Mr::Register(*pd_, l);
  ASSERT_TRUE(mr.ok()) << mr.status().rule();
  EXPECT_EQ((*mr)->layout().iova, l.iova);
  l.iova = 0x7000000000 + ((offset + 8) & (page - 1));
  auto bad = Mr::Register(*pd_, l);
  EXPECT_EQ(Errno(bad), EINVAL);
  EXPECT_NE(bad.status().rule().find("same page offset"), std::string::npos) << bad.status().rule();
  l.iova = l.addr ^ page;  // ibv_reg_mr's own iova (the address) and one page away are fine
  EXPECT_EQ(Errno(Mr::Register(*pd_, l)), 0);
}

TEST_F(MrTest, KeysAreUniqueAndLkeyEqualsRkey) {
  std::set<uint32_t> keys;
  std::vector<std::unique_ptr<Mr>> mrs;
  for (int i = 0; i < 500; ++i) {
    auto mr = Mr::Register(*pd_, Layout(access::kLocalWrite));
    ASSERT_TRUE(mr.ok());
    EXPECT_EQ((*mr)->lkey(), (*mr)->rkey());
    EXPECT_NE((*mr)->lkey(), 0u);
    EXPECT_TRUE(keys.insert((*mr)->lkey()).second);
    mrs.push_back(std::move(mr.value()));
  }
  EXPECT_EQ(pd_->users().count(), 500);
  mrs.clear();
  EXPECT_EQ(pd_->users().count(), 0);
}

TEST_F(MrTest, ReregisterKeepsKeysAndChecksEverything) {
  auto mr = std::move(Mr::Register(*pd_, Layout(access::kLocalWrite)).value());
  uint32_t key = mr->lkey();
  std::vector<uint8_t> other(64);
  MrLayout moved{reinterpret_cast<uint64_t>(other.data()), other.size(), 0,
                 access::kLocalWrite | access::kRemoteWrite};
  ASSERT_TRUE(mr->Reregister(rereg::kChangeTranslation | rereg::kChangeAccess, nullptr, moved).ok());
  EXPECT_EQ(mr->lkey(), key);
  EXPECT_EQ(mr->layout().addr, moved.addr);
  EXPECT_EQ(mr->layout().access, moved.access);
  Pd other_pd(*context_, context_->NewHandle());
  EXPECT_EQ(mr->Reregister(rereg::kChangePd, &other_pd, moved).code(), EINVAL);  // access without CHANGE_ACCESS
  ASSERT_TRUE(mr->Reregister(rereg::kChangePd, &other_pd, MrLayout{}).ok());
  EXPECT_EQ(&mr->pd(), &other_pd);
  EXPECT_EQ(pd_->users().count(), 0);
  EXPECT_EQ(other_pd.users().count(), 1);
  // Invalid requests change nothing.
  MrLayout bad = moved;
  bad.access = access::kRemoteWrite;  // without LOCAL_WRITE
  EXPECT_EQ(mr->Reregister(rereg::kChangeAccess, nullptr, bad).code(), EINVAL);
  EXPECT_EQ(mr->layout().access, moved.access);
  EXPECT_EQ(mr->Reregister(0, nullptr, moved).code(), EINVAL);
  EXPECT_EQ(mr->Reregister(1u << 5, nullptr, moved).code(), EINVAL);
  EXPECT_EQ(mr->Reregister(rereg::kChangePd, nullptr, MrLayout{}).code(), EINVAL);
  auto other_context = std::move(Context::Open().value());
  Pd foreign(*other_context, other_context->NewHandle());
  EXPECT_EQ(mr->Reregister(rereg::kChangePd, &foreign, MrLayout{}).code(), EINVAL);
  mr.reset();
  EXPECT_EQ(other_pd.users().count(), 0);
}

}  // namespace
}  // namespace softverbs::core

namespace softverbs::core {
namespace {

TEST_F(MrTest, WritableAccessNeedsWritableMemory) {
  long page = sysconf(_SC_PAGESIZE);
  void* ro = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  MrLayout l{reinterpret_cast<uint64_t>(ro), static_cast<uint64_t>(page), reinterpret_cast<uint64_t>(ro), 0};
  EXPECT_EQ(Errno(Mr::Register(*pd_, l)), 0);  // read-only access: fine
  l.access = access::kRemoteRead;
  EXPECT_EQ(Errno(Mr::Register(*pd_, l)), 0);
  l.access = access::kLocalWrite;
  auto r = Mr::Register(*pd_, l);
  EXPECT_EQ(Errno(r), EFAULT);
  EXPECT_NE(r.status().rule().find("not writable"), std::string::npos);
  munmap(ro, page);
}

}  // namespace
}  // namespace softverbs::core
