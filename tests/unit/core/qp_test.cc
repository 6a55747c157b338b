#include "core/qp.h"

#include <set>

#include "core/device_limits.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

class QpTest : public CoreTest {
 protected:
  QpTest() {
    send_cq_ = std::move(Cq::Create(*context_, 16, nullptr, 0).value());
    recv_cq_ = std::move(Cq::Create(*context_, 16, nullptr, 0).value());
  }
  QpInitAttributes Init(QpType type) {
    QpInitAttributes a;
    a.type = type;
    a.pd = pd_.get();
    a.send_cq = send_cq_.get();
    a.recv_cq = recv_cq_.get();
    a.cap = {16, 16, 2, 2, 64};
    return a;
  }
  static int Errno(const Result<std::unique_ptr<Qp>>& r) { return r.ok() ? 0 : r.status().code(); }
  std::unique_ptr<Cq> send_cq_, recv_cq_;
};

TEST_F(QpTest, CapsAreWrittenBackAtLeastAsRequested) {
  for (QpType type : {QpType::kRc, QpType::kUc, QpType::kUd}) {
    QpInitAttributes a = Init(type);
    QpCaps asked = a.cap;
    auto qp = Qp::Create(*context_, a);
    ASSERT_TRUE(qp.ok()) << qp.status().rule();
    EXPECT_GE(a.cap.max_send_wr, asked.max_send_wr);
    EXPECT_GE(a.cap.max_recv_wr, asked.max_recv_wr);
    EXPECT_GE(a.cap.max_send_sge, asked.max_send_sge);
    EXPECT_GE(a.cap.max_recv_sge, asked.max_recv_sge);
    EXPECT_GE(a.cap.max_inline_data, asked.max_inline_data);
    EXPECT_EQ((*qp)->Query().cap.max_send_wr, a.cap.max_send_wr);
    EXPECT_EQ((*qp)->state(), QpState::kReset);
  }
}

TEST_F(QpTest, DeviceLimitsAreAcceptedAndOneMoreIsRefused) {
  QpInitAttributes a = Init(QpType::kRc);
  a.cap = {DeviceLimits::kMaxQpWr, DeviceLimits::kMaxQpWr, DeviceLimits::kMaxSge, DeviceLimits::kMaxSge,
           DeviceLimits::kMaxInlineData};
  ASSERT_TRUE(Qp::Create(*context_, a).ok());
  for (int field = 0; field < 5; ++field) {
    QpInitAttributes b = Init(QpType::kRc);
    uint32_t* caps[] = {&b.cap.max_send_wr, &b.cap.max_recv_wr, &b.cap.max_send_sge, &b.cap.max_recv_sge,
                        &b.cap.max_inline_data};
    uint32_t limits[] = {DeviceLimits::kMaxQpWr, DeviceLimits::kMaxQpWr, DeviceLimits::kMaxSge,
                         DeviceLimits::kMaxSge, DeviceLimits::kMaxInlineData};
    *caps[field] = limits[field] + 1;
    auto r = Qp::Create(*context_, b);
    EXPECT_EQ(Errno(r), EINVAL) << "field " << field;
    EXPECT_NE(r.status().rule().find("exceeds the device limit"), std::string::npos);
  }
}

TEST_F(QpTest, WithAnSrqTheReceiveCapsAreIgnoredAndReadZero) {
  SrqAttributes sa{64, 2, 0};
  auto srq = Srq::Create(*pd_, sa);
  ASSERT_TRUE(srq.ok());
  QpInitAttributes a = Init(QpType::kRc);
  a.srq = srq->get();
  a.cap.max_recv_wr = DeviceLimits::kMaxQpWr + 100;  // ignored (ibv_create_qp(3))
  auto qp = Qp::Create(*context_, a);
  ASSERT_TRUE(qp.ok()) << qp.status().rule();
  EXPECT_EQ(a.cap.max_recv_wr, 0u);
  EXPECT_EQ(a.cap.max_recv_sge, 0u);
  EXPECT_EQ((*srq)->users().count(), 1);
  qp->reset();
  EXPECT_EQ((*srq)->users().count(), 0);
}

TEST_F(QpTest, QpNumbersAreUniqueAndNotManagementQps) {
  std::set<uint32_t> seen;
  std::vector<std::unique_ptr<Qp>> qps;
  for (int i = 0; i < 200; ++i) {
    QpInitAttributes a = Init(QpType::kUd);
    auto qp = Qp::Create(*context_, a);
    ASSERT_TRUE(qp.ok());
    EXPECT_GE((*qp)->qp_num(), 0x100u);
    EXPECT_LE((*qp)->qp_num(), 0xffffffu);
    EXPECT_TRUE(seen.insert((*qp)->qp_num()).second);
    qps.push_back(std::move(qp.value()));
  }
}

TEST_F(QpTest, UnofferedTypesAreRefusedWithEopnotsupp) {
  // XRC: xrcd_test.cc; RAW_PACKET QPs are offered (core/raw_qp.h; tests/pyverbs/test_raw_packet.py,
  // which has the capability and the interfaces they need).
  for (QpType type : {QpType::kDriver}) {
    QpInitAttributes a = Init(type);
    EXPECT_EQ(Errno(Qp::Create(*context_, a)), EOPNOTSUPP) << QpTypeName(type);
  }
  QpInitAttributes bogus = Init(static_cast<QpType>(7));
  EXPECT_EQ(Errno(Qp::Create(*context_, bogus)), EINVAL);
}

TEST_F(QpTest, MissingObjectsAreRefused) {
  QpInitAttributes a = Init(QpType::kRc);
  a.pd = nullptr;
  EXPECT_EQ(Errno(Qp::Create(*context_, a)), EINVAL);
  a = Init(QpType::kRc);
  a.send_cq = nullptr;
  EXPECT_EQ(Errno(Qp::Create(*context_, a)), EINVAL);
  a = Init(QpType::kRc);
  a.recv_cq = nullptr;
  EXPECT_EQ(Errno(Qp::Create(*context_, a)), EINVAL);
  a = Init(QpType::kRc);
  a.has_xrcd = true;
  EXPECT_EQ(Errno(Qp::Create(*context_, a)), EINVAL);
  for (bool QpInitAttributes::*raw_only : {&QpInitAttributes::has_max_tso_header, &QpInitAttributes::has_rwq_ind_table,
                                          &QpInitAttributes::has_rx_hash}) {
    a = Init(QpType::kUd);
    a.*raw_only = true;
    EXPECT_EQ(Errno(Qp::Create(*context_, a)), EINVAL);
  }
}

struct FlagCase {
  QpType type;
  uint32_t flags;
  uint32_t source_qpn;
  int expected;
};

TEST_F(QpTest, CreateFlagsAreEachAcceptedWhereTheyApply) {
  using namespace create_flag;
  const FlagCase cases[] = {
      {QpType::kUd, kBlockSelfMcastLb, 0, 0},  {QpType::kRc, kBlockSelfMcastLb, 0, EINVAL},
      {QpType::kUd, kScatterFcs, 0, EINVAL},   {QpType::kRc, kCvlanStripping, 0, EINVAL},
      {QpType::kUd, kSourceQpn, 0x1234, 0},    {QpType::kUd, kSourceQpn, 0, EINVAL},
      {QpType::kUd, kSourceQpn, 1u << 24, EINVAL}, {QpType::kRc, kSourceQpn, 0x1234, EINVAL},
      {QpType::kRc, kPciWriteEndPadding, 0, 0}, {QpType::kRc, 1u << 3, 0, EINVAL},
  };
  for (const FlagCase& c : cases) {
    QpInitAttributes a = Init(c.type);
    a.has_create_flags = true;
    a.create_flags = c.flags;
    a.source_qpn = c.source_qpn;
    EXPECT_EQ(Errno(Qp::Create(*context_, a)), c.expected) << QpTypeName(c.type) << " flags " << c.flags;
  }
  // Without IBV_QP_INIT_ATTR_CREATE_FLAGS in comp_mask, the field is not read.
  QpInitAttributes a = Init(QpType::kRc);
  a.create_flags = kScatterFcs;
  EXPECT_EQ(Errno(Qp::Create(*context_, a)), 0);
}

struct OpsCase {
  QpType type;
  uint64_t ops;
  int expected;
};

TEST_F(QpTest, SendOpsFlagsFollowTheServiceType) {
  using namespace send_op;
  const uint64_t rc_all = kRdmaWrite | kRdmaWriteWithImm | kSend | kSendWithImm | kRdmaRead | kAtomicCmpSwp |
                          kAtomicFetchAdd;
  const OpsCase cases[] = {
      {QpType::kRc, rc_all, 0},
      {QpType::kUc, kRdmaWrite | kRdmaWriteWithImm | kSend | kSendWithImm, 0},
      {QpType::kUc, kRdmaRead, EINVAL},
      {QpType::kUd, kSend | kSendWithImm, 0},
      {QpType::kUd, kRdmaWrite, EINVAL},
      {QpType::kUd, kAtomicFetchAdd, EINVAL},
      {QpType::kRc, kTso, EINVAL},
      // Memory windows: bind and local invalidation on RC and UC, SEND_WITH_INV on RC only.
      {QpType::kRc, kBindMw | kLocalInv | kSendWithInv, 0},
      {QpType::kUc, kBindMw | kLocalInv, 0},
      {QpType::kUc, kSendWithInv, EINVAL},
      {QpType::kUd, kBindMw, EINVAL},
      {QpType::kUd, kLocalInv, EINVAL},
      {QpType::kRc, kAtomicWrite, 0},  // IBA 1.5 9.4.6, RC only (as rxe)
      {QpType::kUc, kAtomicWrite, EINVAL},
      {QpType::kUd, kAtomicWrite, EINVAL},
      {QpType::kRc, 1ull << 11, EINVAL},
      {QpType::kRc, 1ull << 40, EINVAL},
  };
  for (const OpsCase& c : cases) {
    QpInitAttributes a = Init(c.type);
    a.has_send_ops_flags = true;
    a.send_ops_flags = c.ops;
    EXPECT_EQ(Errno(Qp::Create(*context_, a)), c.expected) << QpTypeName(c.type) << " ops " << c.ops;
  }
}

class QpModifyTest : public QpTest {
 protected:
  std::unique_ptr<Qp> MakeRc() {
    QpInitAttributes a = Init(QpType::kRc);
    return std::move(Qp::Create(*context_, a).value());
  }
  static QpAttributes ToInit() {
    QpAttributes a;
    a.qp_state = QpState::kInit;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = access::kRemoteWrite | access::kLocalWrite;
    return a;
  }
  static constexpr uint32_t kInitMask = attr::kState | attr::kPkeyIndex | attr::kPort | attr::kAccessFlags;
  QpAttributes ToRtr(uint32_t dest) {
    QpAttributes a;
    a.qp_state = QpState::kRtr;
    a.path_mtu = Mtu::k4096;
    a.dest_qp_num = dest;
    a.rq_psn = 0x123456;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = true;
    a.ah_attr.port_num = 1;
    a.ah_attr.sgid_index = 1;
    a.ah_attr.dgid = context_->gids().at(1).gid;
    return a;
  }
  static constexpr uint32_t kRtrMask = attr::kState | attr::kAv | attr::kPathMtu | attr::kDestQpn |
                                       attr::kRqPsn | attr::kMaxDestRdAtomic | attr::kMinRnrTimer;
};

TEST_F(QpModifyTest, AppliesWhatItAcceptsAndQueryReturnsIt) {
  auto qp = MakeRc();
  ASSERT_TRUE(qp->Modify(ToInit(), kInitMask).ok());
  ASSERT_TRUE(qp->Modify(ToRtr(0x4321), kRtrMask).ok());
  QpAttributes q = qp->Query();
  EXPECT_EQ(q.qp_state, QpState::kRtr);
  EXPECT_EQ(q.cur_qp_state, QpState::kRtr);
  EXPECT_EQ(q.dest_qp_num, 0x4321u);
  EXPECT_EQ(q.rq_psn, 0x123456u);
  EXPECT_EQ(q.path_mtu, Mtu::k4096);
  EXPECT_EQ(q.max_dest_rd_atomic, 4);
  EXPECT_EQ(q.min_rnr_timer, 12);
  EXPECT_EQ(q.ah_attr.dgid, context_->gids().at(1).gid);
  EXPECT_EQ(q.qp_access_flags, access::kRemoteWrite | access::kLocalWrite);
  EXPECT_EQ(q.port_num, 1);
}

TEST_F(QpModifyTest, ARefusedRequestChangesNothing) {
  auto qp = MakeRc();
  ASSERT_TRUE(qp->Modify(ToInit(), kInitMask).ok());
  QpAttributes before = qp->Query();
  QpAttributes bad = ToRtr(0x4321);
  bad.pkey_index = 0;
  bad.qp_access_flags = access::kRemoteRead | access::kLocalWrite;  // valid optional attribute ...
  Status s = qp->Modify(bad, (kRtrMask | attr::kAccessFlags) & ~attr::kMinRnrTimer);  // ... but one required missing
  EXPECT_EQ(s.code(), EINVAL);
  EXPECT_EQ(s.rule(), "RC INIT->RTR is missing IBV_QP_MIN_RNR_TIMER");
  QpAttributes after = qp->Query();
  EXPECT_EQ(after.qp_state, QpState::kInit);
  EXPECT_EQ(after.qp_access_flags, before.qp_access_flags);
  EXPECT_EQ(after.dest_qp_num, before.dest_qp_num);
}

TEST_F(QpModifyTest, ResetReturnsToInitialAttributesAndDropsCompletions) {
  auto qp = MakeRc();
  ASSERT_TRUE(qp->Modify(ToInit(), kInitMask).ok());
  Completion mine, other;
  mine.qp_num = qp->qp_num();
  other.qp_num = qp->qp_num() + 1;
  ASSERT_TRUE(send_cq_->Push(mine));
  ASSERT_TRUE(send_cq_->Push(other));
  ASSERT_TRUE(recv_cq_->Push(mine));
  QpAttributes reset;
  reset.qp_state = QpState::kReset;
  ASSERT_TRUE(qp->Modify(reset, attr::kState).ok());
  QpAttributes q = qp->Query();
  EXPECT_EQ(q.qp_state, QpState::kReset);
  EXPECT_EQ(q.qp_access_flags, 0u);
  EXPECT_EQ(q.cap.max_send_wr, 16u);  // capabilities belong to the QP, not to its state
  Completion out[4];
  ASSERT_EQ(send_cq_->Poll(out, 4), 1);
  EXPECT_EQ(out[0].qp_num, other.qp_num);
  EXPECT_EQ(recv_cq_->Poll(out, 4), 0);
}

TEST_F(QpModifyTest, AvPortZeroMeansTheQpsPort) {
  auto qp = MakeRc();
  ASSERT_TRUE(qp->Modify(ToInit(), kInitMask).ok());
  QpAttributes rtr = ToRtr(0x4321);
  rtr.ah_attr.port_num = 0;
  ASSERT_TRUE(qp->Modify(rtr, kRtrMask).ok());
  EXPECT_EQ(qp->Query().ah_attr.port_num, 1);
}

TEST_F(QpModifyTest, MulticastAttachRulesAndDestroyWhileAttached) {
  const Gid v4_group = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3};
  const Gid v6_group = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};
  const Gid unicast = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  auto rc = MakeRc();
  EXPECT_EQ(rc->AttachMcast(v4_group, 0).code(), EINVAL);  // UD only
  QpInitAttributes a = Init(QpType::kUd);
  auto ud = std::move(Qp::Create(*context_, a).value());
  EXPECT_EQ(ud->AttachMcast(unicast, 0).code(), EINVAL);
  EXPECT_EQ(ud->DetachMcast(v4_group).code(), EINVAL);  // not attached
  ASSERT_TRUE(ud->AttachMcast(v4_group, 0).ok());
  ASSERT_TRUE(ud->AttachMcast(v4_group, 0).ok());  // twice is one attachment
  ASSERT_TRUE(ud->AttachMcast(v6_group, 0).ok());
  EXPECT_EQ(ud->CheckDestroy().code(), EBUSY);  // ibv_destroy_qp(3)
  ASSERT_TRUE(ud->DetachMcast(v4_group).ok());
  EXPECT_EQ(ud->DetachMcast(v4_group).code(), EINVAL);
  EXPECT_EQ(ud->CheckDestroy().code(), EBUSY);
  ASSERT_TRUE(ud->DetachMcast(v6_group).ok());
  EXPECT_TRUE(ud->CheckDestroy().ok());
}

}  // namespace
}  // namespace softverbs::core

namespace softverbs::core {
namespace {

// Values beyond the C enums' ranges reach the core intact and are refused, never truncated into
// a valid value.
TEST_F(QpModifyTest, OutOfRangeEnumsAreRefusedNotTruncated) {
  auto qp = MakeRc();
  QpAttributes a = ToInit();
  a.qp_state = static_cast<QpState>(256 + static_cast<uint32_t>(QpState::kInit));
  EXPECT_EQ(qp->Modify(a, kInitMask).code(), EINVAL);
  EXPECT_EQ(qp->state(), QpState::kReset);
  ASSERT_TRUE(qp->Modify(ToInit(), kInitMask).ok());
  QpAttributes rtr = ToRtr(0x4321);
  rtr.path_mtu = static_cast<Mtu>(0x101);
  EXPECT_EQ(qp->Modify(rtr, kRtrMask).code(), EINVAL);
  QpAttributes to_err;
  to_err.qp_state = QpState::kErr;
  QpAttributes reset;
  reset.qp_state = QpState::kReset;
  ASSERT_TRUE(qp->Modify(reset, attr::kState).ok());
  EXPECT_EQ(qp->Modify(to_err, attr::kState).code(), EINVAL);  // RESET->ERR: refused as HCAs do
  QpInitAttributes bad = Init(static_cast<QpType>(0x100 + static_cast<uint32_t>(QpType::kRc)));
  EXPECT_EQ(Errno(Qp::Create(*context_, bad)), EINVAL);
}

TEST_F(QpTest, UcCannotUseAnSrq) {
  SrqAttributes sa{16, 1, 0};
  auto srq = std::move(Srq::Create(*pd_, sa).value());
  QpInitAttributes a = Init(QpType::kUc);
  a.srq = srq.get();
  EXPECT_EQ(Errno(Qp::Create(*context_, a)), EINVAL);
}

}  // namespace
}  // namespace softverbs::core
