// Memory windows: the bind rules (IBA C10-72..75, ibv_bind_mw(3)), what a bound window's key
// grants through ResolveKey, and the three ways it stops granting it (rebind / unbind, local
// and remote invalidation), plus ibv_dereg_mr's refusal while a window is bound.
#include "transport/window_key.h"

#include <array>
#include <vector>

#include <gtest/gtest.h>

#include "core/mr.h"
#include "core/mw.h"
#include "tests/unit/core/test_context.h"
#include "transport/indirect_key.h"
#include "transport/key_table.h"

namespace softverbs::transport {
namespace {

namespace access = core::access;
constexpr uint32_t kQpn = 0x123;

class WindowKeyTest : public core::CoreTest {
 protected:
  void SetUp() override {
    mr_ = Register(access::kLocalWrite | access::kMwBind);
    qp_ = WindowQp{kQpn, pd_->host_id()};
  }
  std::unique_ptr<core::Mr> Register(uint32_t acc) {
    core::MrLayout l{reinterpret_cast<uint64_t>(buf_.data()), buf_.size(), 0x10000, acc};  // iova 0x10000
    return std::move(core::Mr::Register(*pd_, l).value());
  }
  std::unique_ptr<core::Mw> Alloc(uint32_t type) { return std::move(core::Mw::Allocate(*pd_, type).value()); }
  BindRequest Req(const core::Mw& mw, uint64_t addr, uint64_t length, uint32_t acc) const {
    return BindRequest{mw.handle(), ibv_inc(mw.handle()), mr_->lkey(), addr, length, acc};
  }
  static uint32_t ibv_inc(uint32_t rkey) { return (rkey & ~0xffu) | ((rkey + 1) & 0xff); }
  std::string Bind(const core::Mw& mw, const BindRequest& r) {
    return WindowKey::Find(mw.handle())->Bind(r, qp_);
  }
  // A remote access through `rkey` arriving at QP `qpn` of the test PD: the pieces it reaches.
  bool Remote(uint32_t rkey, uint64_t addr, uint64_t len, uint32_t acc, uint32_t qpn = kQpn, PinnedPieces* out = nullptr) {
    PinnedPieces pieces;
    KeyRule rule{context_->local().slot(), pd_->host_id(), acc, acc != access::kRemoteRead, true, qpn};
    return ResolveKey(context_->registry(), rkey, addr, len, len, rule,
                      [this](fabric::SharedRef r) { return context_->local().At(r); }, out ? out : &pieces);
  }
  // Page-aligned: the MR's iova 0x10000 must be at the same page offset as its address.
  alignas(4096) std::array<uint8_t, 4096> buf_{};
  std::unique_ptr<core::Mr> mr_;
  WindowQp qp_;
};

TEST_F(WindowKeyTest, AnUnboundWindowGrantsNothing) {
  auto mw = Alloc(1);
  EXPECT_FALSE(Remote(mw->handle(), 0x10000, 8, access::kRemoteRead));
}

TEST_F(WindowKeyTest, Type1BindGrantsItsRangeAndAccessOnly) {
  auto mw = Alloc(1);
  BindRequest r = Req(*mw, 0x10100, 256, access::kRemoteRead | access::kRemoteWrite);
  ASSERT_EQ(Bind(*mw, r), "");
  PinnedPieces p;
  ASSERT_TRUE(Remote(r.rkey, 0x10180, 16, access::kRemoteWrite, kQpn, &p));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p.data()[0].iov_base, buf_.data() + 0x180);
  EXPECT_TRUE(Remote(r.rkey, 0x10100, 256, access::kRemoteRead));
  EXPECT_FALSE(Remote(r.rkey, 0x100ff, 2, access::kRemoteRead));   // before the window
  EXPECT_FALSE(Remote(r.rkey, 0x101ff, 2, access::kRemoteRead));   // past its end
  EXPECT_FALSE(Remote(r.rkey, 0x10100, 8, access::kRemoteAtomic));  // not granted
  EXPECT_FALSE(Remote(mw->handle(), 0x10100, 8, access::kRemoteRead));  // the old variant
  // Any QP of the PD (type 1); never as a local key.
  EXPECT_TRUE(Remote(r.rkey, 0x10100, 8, access::kRemoteRead, kQpn + 1));
  PinnedPieces local;
  KeyRule lrule{context_->local().slot(), pd_->host_id(), 0, false};
  EXPECT_FALSE(ResolveKey(context_->registry(), r.rkey, 0x10100, 8, 8, lrule,
                          [](fabric::SharedRef) -> void* { return nullptr; }, &local));
}

TEST_F(WindowKeyTest, ZeroBasedWindowsTakeOffsets) {
  auto mw = Alloc(1);
  BindRequest r = Req(*mw, 0x10200, 64, access::kRemoteRead | access::kZeroBased);
  ASSERT_EQ(Bind(*mw, r), "");
  PinnedPieces p;
  ASSERT_TRUE(Remote(r.rkey, 8, 8, access::kRemoteRead, kQpn, &p));
  EXPECT_EQ(p.data()[0].iov_base, buf_.data() + 0x208);
  EXPECT_FALSE(Remote(r.rkey, 60, 8, access::kRemoteRead));
}

TEST_F(WindowKeyTest, Type1RebindReplacesAndZeroLengthUnbinds) {
  auto mw = Alloc(1);
  BindRequest first = Req(*mw, 0x10000, 64, access::kRemoteRead);
  ASSERT_EQ(Bind(*mw, first), "");
  BindRequest second = first;
  second.rkey = ibv_inc(first.rkey);
  second.addr = 0x10800;
  ASSERT_EQ(Bind(*mw, second), "");
  EXPECT_FALSE(Remote(first.rkey, 0x10000, 8, access::kRemoteRead));
  EXPECT_TRUE(Remote(second.rkey, 0x10800, 8, access::kRemoteRead));
  BindRequest unbind{mw->handle(), ibv_inc(second.rkey), 0, 0, 0, 0};
  ASSERT_EQ(Bind(*mw, unbind), "");
  EXPECT_FALSE(Remote(second.rkey, 0x10800, 8, access::kRemoteRead));
  EXPECT_FALSE(Remote(unbind.rkey, 0x10800, 8, access::kRemoteRead));
}

TEST_F(WindowKeyTest, BindRulesAreCheckedBeforeAnythingChanges) {
  auto mw = Alloc(1);
  auto expect_refused = [&](BindRequest r, const char* rule_part) {
    std::string rule = Bind(*mw, r);
    EXPECT_NE(rule.find(rule_part), std::string::npos) << rule;
    EXPECT_FALSE(Remote(r.rkey, r.addr, 1, access::kRemoteRead));
  };
  expect_refused(Req(*mw, 0x10000 + 4090, 8, access::kRemoteRead), "C10-75");         // leaves the MR
  expect_refused(Req(*mw, 0xf000, 8, access::kRemoteRead), "C10-75");                 // before it
  expect_refused(Req(*mw, 0x10000, 8, access::kRemoteRead | (1u << 12)), "no ibv_access_flags");
  BindRequest other_index = Req(*mw, 0x10000, 8, access::kRemoteRead);
  other_index.rkey += 0x100;
  expect_refused(other_index, "index");
  auto no_bind = Register(access::kLocalWrite);  // no IBV_ACCESS_MW_BIND
  BindRequest r = Req(*mw, 0x10000, 8, access::kRemoteRead);
  r.mr_key = no_bind->lkey();
  expect_refused(r, "C10-73");
  auto read_only = Register(access::kMwBind);  // REMOTE_WRITE needs LOCAL_WRITE on the MR
  r = Req(*mw, 0x10000, 8, access::kRemoteWrite);
  r.mr_key = read_only->lkey();
  expect_refused(r, "C10-74");
  r = Req(*mw, 0x10000, 8, access::kRemoteRead);
  r.mr_key = 0xdead00;
  expect_refused(r, "no valid memory region");
  qp_.pd = pd_->host_id() + 1;  // a QP of another PD
  expect_refused(Req(*mw, 0x10000, 8, access::kRemoteRead), "C10-72");
}

// Issue 13: hardware and rxe accept the local bits on a window and ignore them; the window grants
// exactly its REMOTE_* bits.
TEST_F(WindowKeyTest, LocalAccessBitsAreAcceptedAndIgnored) {
  auto mw = Alloc(2);
  BindRequest r = Req(*mw, 0x10000, 64, access::kLocalWrite | access::kRemoteWrite | access::kMwBind |
                                            access::kRelaxedOrdering);
  ASSERT_EQ(Bind(*mw, r), "");
  EXPECT_TRUE(Remote(r.rkey, 0x10000, 8, access::kRemoteWrite));
  EXPECT_FALSE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead));  // not granted
  ASSERT_EQ(LocalInvalidate(context_->local(), r.rkey, qp_), "");
  BindRequest local_only = Req(*mw, 0x10000, 64, access::kLocalWrite);
  local_only.rkey = (r.rkey & ~0xffu) | ((r.rkey + 1) & 0xff);
  ASSERT_EQ(Bind(*mw, local_only), "");
  EXPECT_FALSE(Remote(local_only.rkey, 0x10000, 8, access::kRemoteWrite));  // grants nothing remote
}

TEST_F(WindowKeyTest, Type2IsBoundToItsQpAndBindsOnlyWhenFree) {
  auto mw = Alloc(2);
  BindRequest r = Req(*mw, 0x10000, 128, access::kRemoteRead);
  ASSERT_EQ(Bind(*mw, r), "");
  EXPECT_TRUE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead, kQpn));
  EXPECT_FALSE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead, kQpn + 1));  // type 2B: its QP only
  BindRequest again = r;
  again.rkey = ibv_inc(r.rkey);
  EXPECT_NE(Bind(*mw, again).find("still bound"), std::string::npos);
  EXPECT_TRUE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead));  // unchanged
  // Invalidated, it is free: a new bind with the next key works.
  ASSERT_EQ(LocalInvalidate(context_->local(), r.rkey, qp_), "");
  EXPECT_FALSE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead));
  EXPECT_NE(LocalInvalidate(context_->local(), r.rkey, qp_), "");  // already invalid
  ASSERT_EQ(Bind(*mw, again), "");
  EXPECT_TRUE(Remote(again.rkey, 0x10000, 8, access::kRemoteRead));
}

TEST_F(WindowKeyTest, RemoteInvalidationNeedsTheBoundQpAndAType2Window) {
  auto t2 = Alloc(2);
  BindRequest r = Req(*t2, 0x10000, 128, access::kRemoteRead);
  ASSERT_EQ(Bind(*t2, r), "");
  const uint32_t me = context_->local().slot();
  EXPECT_FALSE(RemoteInvalidate(context_->registry(), r.rkey, me, kQpn + 1));  // another QP
  EXPECT_FALSE(RemoteInvalidate(context_->registry(), r.rkey, me + 1, kQpn));  // another process
  EXPECT_TRUE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead));
  EXPECT_TRUE(RemoteInvalidate(context_->registry(), r.rkey, me, kQpn));
  EXPECT_FALSE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead));
  EXPECT_FALSE(RemoteInvalidate(context_->registry(), r.rkey, me, kQpn));  // once

  auto t1 = Alloc(1);
  BindRequest r1 = Req(*t1, 0x10000, 128, access::kRemoteRead);
  ASSERT_EQ(Bind(*t1, r1), "");
  EXPECT_FALSE(RemoteInvalidate(context_->registry(), r1.rkey, me, kQpn));  // type 1: never
  EXPECT_NE(LocalInvalidate(context_->local(), r1.rkey, qp_).find("type 1"), std::string::npos);
  EXPECT_NE(LocalInvalidate(context_->local(), mr_->lkey(), qp_).find("ibv_reg_mr"), std::string::npos);
  EXPECT_FALSE(RemoteInvalidate(context_->registry(), mr_->lkey(), me, kQpn));
  EXPECT_TRUE(Remote(r1.rkey, 0x10000, 8, access::kRemoteRead));
}

TEST_F(WindowKeyTest, DestroyingTheQpEndsItsType2Windows) {
  auto mine = Alloc(2), other = Alloc(2), t1 = Alloc(1);
  BindRequest r = Req(*mine, 0x10000, 64, access::kRemoteRead);
  ASSERT_EQ(Bind(*mine, r), "");
  ASSERT_EQ(Bind(*t1, Req(*t1, 0x10000, 64, access::kRemoteRead)), "");
  qp_.qp_num = kQpn + 1;
  BindRequest o = Req(*other, 0x10000, 64, access::kRemoteRead);
  ASSERT_EQ(Bind(*other, o), "");
  InvalidateWindowsBoundTo(context_->registry(), kQpn);
  EXPECT_FALSE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead, kQpn));
  EXPECT_TRUE(Remote(o.rkey, 0x10000, 8, access::kRemoteRead, kQpn + 1));  // another QP's window
  EXPECT_TRUE(Remote(ibv_inc(t1->handle()), 0x10000, 8, access::kRemoteRead, kQpn));  // type 1: no QP
}

TEST_F(WindowKeyTest, DeregisterIsRefusedWhileAWindowIsBound) {
  auto mw = Alloc(2);
  BindRequest r = Req(*mw, 0x10000, 128, access::kRemoteRead);
  ASSERT_EQ(Bind(*mw, r), "");
  Status s = mr_->Withdraw();
  EXPECT_EQ(s.code(), EBUSY) << s.rule();
  EXPECT_TRUE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead));  // nothing changed
  // Once invalidated -- by anyone -- the MR goes.
  ASSERT_TRUE(RemoteInvalidate(context_->registry(), r.rkey, context_->local().slot(), kQpn));
  EXPECT_TRUE(mr_->Withdraw().ok());
}

TEST_F(WindowKeyTest, DeallocUnbindsAndAQueuedBindFindsNoWindow) {
  auto mw = Alloc(1);
  BindRequest r = Req(*mw, 0x10000, 128, access::kRemoteRead);
  ASSERT_EQ(Bind(*mw, r), "");
  const uint32_t handle = mw->handle();
  mw.reset();
  EXPECT_FALSE(Remote(r.rkey, 0x10000, 8, access::kRemoteRead));
  EXPECT_EQ(WindowKey::Find(handle), nullptr);
  EXPECT_TRUE(mr_->Withdraw().ok());
}

}  // namespace
}  // namespace softverbs::transport
