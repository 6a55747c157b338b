// Null keys (ibv_alloc_null_mr(3)): ResolveKey gives reads the zero chunk and writes the
// discard chunk, for any address and length, local accesses only; core::Mr::AllocateNull
// publishes such a key and withdraws it like any MR.
#include "transport/null_key.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/mkey.h"
#include "core/mr.h"
#include "tests/unit/core/test_context.h"
#include "transport/indirect_key.h"

namespace softverbs::transport {
namespace {

class NullKeyTest : public core::CoreTest {
 protected:
  void SetUp() override {
    auto mr = core::Mr::AllocateNull(*pd_);
    ASSERT_TRUE(mr.ok()) << mr.status().rule();
    mr_ = std::move(mr.value());
  }
  KeyRule Rule(uint32_t access, bool writes, bool remote = false) {
    return {context_->local().slot(), pd_->host_id(), access, writes, remote, 0};
  }
  bool Resolve(uint64_t addr, uint64_t length, const KeyRule& rule, PinnedPieces* pieces) {
    auto& local = context_->local();
    return ResolveKey(context_->registry(), mr_->lkey(), addr, length, length, rule,
                      [&](fabric::SharedRef r) { return local.At(r); }, pieces);
  }
  static uint64_t Total(const PinnedPieces& p) {
    uint64_t n = 0;
    for (size_t i = 0; i < p.size(); ++i) n += p.data()[i].iov_len;
    return n;
  }
  std::unique_ptr<core::Mr> mr_;
};

TEST_F(NullKeyTest, ReadsAreZerosAtAnyAddressAndLength) {
  PinnedPieces p;
  const uint64_t n = 2 * kNullChunk + 5;  // more than one chunk: several pieces
  ASSERT_TRUE(Resolve(0xfffffffffff00000ull, n, Rule(0, false), &p));
  EXPECT_EQ(p.size(), 3u);
  EXPECT_EQ(Total(p), n);
  for (size_t i = 0; i < p.size(); ++i) {
    std::vector<uint8_t> zeros(p.data()[i].iov_len, 0);
    EXPECT_EQ(memcmp(p.data()[i].iov_base, zeros.data(), zeros.size()), 0);
    EXPECT_LE(p.data()[i].iov_len, kNullChunk);
  }
}

TEST_F(NullKeyTest, WritesGoToTheDiscardChunkNeverToTheZeroChunk) {
  PinnedPieces w, r;
  ASSERT_TRUE(Resolve(0x1000, 4096, Rule(core::access::kLocalWrite, true), &w));
  ASSERT_EQ(w.size(), 1u);
  memset(w.data()[0].iov_base, 0xab, 4096);  // what a receive into the null MR does
  ASSERT_TRUE(Resolve(0x1000, 4096, Rule(0, false), &r));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_NE(r.data()[0].iov_base, w.data()[0].iov_base);
  std::vector<uint8_t> zeros(4096, 0);
  EXPECT_EQ(memcmp(r.data()[0].iov_base, zeros.data(), zeros.size()), 0);  // still zeros
}

TEST_F(NullKeyTest, NoRemoteAccessButAnyPdOfTheProcess) {
  PinnedPieces p;
  EXPECT_FALSE(Resolve(0, 8, Rule(core::access::kRemoteWrite, true, true), &p));
  EXPECT_FALSE(Resolve(0, 8, Rule(0, false, true), &p));  // even a remote read of nothing granted
  EXPECT_EQ(p.size(), 0u);
  // mlx5's null mkey is the device's: a QP of another PD may name it (never stricter than it).
  KeyRule other = Rule(0, false);
  other.pd += 1;
  EXPECT_TRUE(Resolve(0, 8, other, &p));
  // Another process's null key is not this process's lkey.
  KeyRule foreign = Rule(0, false);
  foreign.owner_slot += 1;
  PinnedPieces q;
  EXPECT_FALSE(Resolve(0, 8, foreign, &q));
}

TEST_F(NullKeyTest, EachNullMrHasItsOwnKeyAndDeregistrationWithdrawsIt) {
  auto second = core::Mr::AllocateNull(*pd_);
  ASSERT_TRUE(second.ok());
  EXPECT_NE((*second)->lkey(), mr_->lkey());
  const uint32_t key = mr_->lkey();
  ASSERT_TRUE(mr_->Withdraw().ok());
  mr_.reset();
  PinnedPieces p;
  auto& local = context_->local();
  EXPECT_FALSE(ResolveKey(context_->registry(), key, 0, 8, 8, Rule(0, false),
                          [&](fabric::SharedRef r) { return local.At(r); }, &p));
}

TEST_F(NullKeyTest, NotReregisteredNorUsedInMkeyLayouts) {
  core::MrLayout l;
  l.access = core::access::kLocalWrite;
  EXPECT_EQ(mr_->Reregister(core::rereg::kChangeAccess, nullptr, l).code(), EINVAL);
  auto mkey = core::Mkey::Create(*pd_, 1);
  ASSERT_TRUE(mkey.ok());
  auto umr = (*mkey)->BuildUmr(*pd_, core::UmrSpec{true, core::access::kLocalWrite, true, false, 1,
                                                   {{0, 8, 0, mr_->lkey(), 0}}});
  EXPECT_EQ(umr.status().code(), EINVAL);
}

}  // namespace
}  // namespace softverbs::transport
