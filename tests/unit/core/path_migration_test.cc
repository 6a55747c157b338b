// Automatic path migration (IBA 17.2.8, core/path_migration.h): the path migration states that
// ibv_modify_qp(3) moves between, checked before anything changes, and what a QP reports.
#include "core/path_migration.h"

#include <gtest/gtest.h>

#include "core/qp.h"
#include "core/qp_state_machine.h"
#include "tests/unit/core/test_context.h"

namespace softverbs::core {
namespace {

using M = MigState;
using Step = MigrationStep;

struct MigCase {
  M current;
  bool alt_loaded;
  M requested;
  Step step;         // when accepted
  const char* rule;  // "" when accepted
};

TEST(PathMigrationTable, EachStateAndRequestIsCheckedThenStepped) {
  const MigCase cases[] = {
      {M::kMigrated, false, M::kMigrated, Step::kNone, ""},
      {M::kMigrated, true, M::kMigrated, Step::kNone, ""},
      {M::kArmed, true, M::kMigrated, Step::kMigrate, ""},  // the consumer forces the migration
      {M::kMigrated, true, M::kRearm, Step::kArm, ""},
      {M::kMigrated, true, M::kArmed, Step::kArm, ""},      // mlx5 takes ARMED as well
      {M::kArmed, true, M::kRearm, Step::kArm, ""},
      {M::kMigrated, false, M::kRearm, Step::kNone,
       "path_mig_state REARM arms the alternate path, but none is loaded (IBV_QP_ALT_PATH, IBA 17.2.8)"},
      {M::kMigrated, false, M::kArmed, Step::kNone,
       "path_mig_state ARMED arms the alternate path, but none is loaded (IBV_QP_ALT_PATH, IBA 17.2.8)"},
      {M::kMigrated, true, static_cast<M>(3), Step::kNone, "path_mig_state 3 is not an enum ibv_mig_state"},
  };
  for (const MigCase& c : cases) {
    Step step = Step::kMigrate;
    const std::string rule = CheckMigration(c.current, c.alt_loaded, attr::kPathMigState, c.requested, &step);
    EXPECT_EQ(rule, c.rule) << MigStateName(c.current) << " + " << static_cast<int>(c.requested);
    EXPECT_EQ(step, c.step) << MigStateName(c.current) << " + " << static_cast<int>(c.requested);
  }
}

TEST(PathMigrationTable, WithoutThePathMigStateBitNothingIsLookedAt) {
  Step step = Step::kArm;
  EXPECT_EQ(CheckMigration(M::kArmed, false, attr::kAltPath, static_cast<M>(9), &step), "");
  EXPECT_EQ(step, Step::kNone);
}

TEST(PathMigrationTable, MigrateSwapsThePathsAndEndsMigrated) {
  QpAttributes a;
  a.ah_attr.dgid[15] = 1;
  a.alt_ah_attr.dgid[15] = 2;
  a.port_num = 1;
  a.alt_port_num = 1;
  a.pkey_index = 0;
  a.alt_pkey_index = 0;
  a.timeout = 14;
  a.alt_timeout = 9;
  a.path_mig_state = M::kArmed;
  Migrate(a);
  EXPECT_EQ(a.ah_attr.dgid[15], 2);
  EXPECT_EQ(a.alt_ah_attr.dgid[15], 1);  // the way back, for a REARM without a new path
  EXPECT_EQ(a.timeout, 9);
  EXPECT_EQ(a.alt_timeout, 14);
  EXPECT_EQ(a.path_mig_state, M::kMigrated);
}

// The alternate path's values obey the primary path's rules (CheckModify, step g).
TEST(PathMigrationTable, AlternatePathValuesAreChecked) {
  ModifyContext ctx;
  ctx.current = QpState::kRts;
  ctx.valid_gids = 0x3;
  QpAttributes a;
  a.alt_port_num = 1;
  a.alt_ah_attr.is_global = true;
  a.alt_ah_attr.sgid_index = 1;
  a.alt_ah_attr.dgid[15] = 7;
  Step step = Step::kNone;
  ASSERT_TRUE(CheckModify(ctx, a, attr::kAltPath, &step).ok());
  QpAttributes bad = a;
  bad.alt_port_num = 0;
  auto r = CheckModify(ctx, bad, attr::kAltPath);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(r.status().rule(), "RC RTS->RTS: alt_port_num 0 does not exist: softverbs0 has 1 port");
  bad = a;
  bad.alt_pkey_index = 1;
  EXPECT_EQ(CheckModify(ctx, bad, attr::kAltPath).status().code(), EINVAL);
  bad = a;
  bad.alt_ah_attr.is_global = false;  // RoCE has no LID routing
  r = CheckModify(ctx, bad, attr::kAltPath);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().rule().rfind("RC RTS->RTS: alt_ah_attr: ", 0), 0u) << r.status().rule();
  // REARM with the path in the same request arms it; a forced MIGRATED needs an armed QP.
  a.path_mig_state = M::kRearm;
  ASSERT_TRUE(CheckModify(ctx, a, attr::kAltPath | attr::kPathMigState, &step).ok());
  EXPECT_EQ(step, Step::kArm);
  a.path_mig_state = M::kRearm;
  r = CheckModify(ctx, a, attr::kPathMigState);
  EXPECT_EQ(r.status().code(), EINVAL);  // no alternate path loaded
  ctx.mig = M::kArmed;
  ctx.alt_loaded = true;
  a.path_mig_state = M::kMigrated;
  ASSERT_TRUE(CheckModify(ctx, a, attr::kPathMigState, &step).ok());
  EXPECT_EQ(step, Step::kMigrate);
  // UD has no path to migrate (IBA 11.2.4.2): the table does not accept the bits.
  ctx.type = QpType::kUd;
  EXPECT_EQ(CheckModify(ctx, a, attr::kPathMigState).status().code(), EINVAL);
}

// alt_timeout has the 5 bits of the Local ACK Timeout, cut as mlx5 does (FitFieldWidths).
TEST(PathMigrationTable, AltTimeoutIsCutToItsWireWidth) {
  QpAttributes a;
  a.alt_timeout = 33;
  EXPECT_EQ(FitFieldWidths(a, attr::kAltPath), "alt_timeout 33 masked to its 5 bits: 1");
  EXPECT_EQ(a.alt_timeout, 1);
}

class QpPathMigrationTest : public CoreTest {
 protected:
  QpPathMigrationTest() {
    cq_ = std::move(Cq::Create(*context_, 16, nullptr, 0).value());
    QpInitAttributes i;
    i.type = QpType::kRc;
    i.pd = pd_.get();
    i.send_cq = cq_.get();
    i.recv_cq = cq_.get();
    i.cap = {4, 4, 1, 1, 0};
    qp_ = std::move(Qp::Create(*context_, i).value());
  }
  AddressVector Av(int gid_index, uint32_t flow_label) const {
    AddressVector av;
    av.is_global = true;
    av.port_num = 1;
    av.sgid_index = 1;
    av.dgid = context_->gids().at(gid_index).gid;
    av.flow_label = flow_label;
    return av;
  }
  // RESET -> INIT -> RTR (primary path, flow label 1) -> RTS.
  void ToRts(uint32_t rts_mask, const QpAttributes& extra) {
    QpAttributes a = extra;
    a.qp_state = QpState::kInit;
    a.port_num = 1;
    ASSERT_TRUE(qp_->Modify(a, attr::kState | attr::kPkeyIndex | attr::kPort | attr::kAccessFlags).ok());
    a.qp_state = QpState::kRtr;
    a.path_mtu = Mtu::k1024;
    a.dest_qp_num = 0x4321;
    a.ah_attr = Av(1, 1);
    ASSERT_TRUE(qp_->Modify(a, attr::kState | attr::kAv | attr::kPathMtu | attr::kDestQpn | attr::kRqPsn |
                                   attr::kMaxDestRdAtomic | attr::kMinRnrTimer)
                    .ok());
    a.qp_state = QpState::kRts;
    a.timeout = 14;
    Status s = qp_->Modify(a, attr::kState | attr::kSqPsn | attr::kTimeout | attr::kRetryCnt | attr::kRnrRetry |
                                  attr::kMaxQpRdAtomic | rts_mask);
    ASSERT_TRUE(s.ok()) << s.rule();
  }
  QpAttributes Alt() const {
    QpAttributes a;
    a.alt_ah_attr = Av(1, 2);
    a.alt_port_num = 1;
    a.alt_timeout = 9;
    a.path_mig_state = M::kRearm;
    return a;
  }
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<Qp> qp_;
};

TEST_F(QpPathMigrationTest, RearmedAlternatePathIsReportedArmed) {
  ToRts(attr::kAltPath | attr::kPathMigState, Alt());
  const QpAttributes q = qp_->Query();
  EXPECT_EQ(q.path_mig_state, M::kArmed);  // REARM arms at once
  EXPECT_EQ(q.alt_ah_attr.flow_label, 2u);
  EXPECT_EQ(q.alt_ah_attr.dgid, context_->gids().at(1).gid);
  EXPECT_EQ(q.alt_port_num, 1);
  EXPECT_EQ(q.alt_timeout, 9);
  EXPECT_EQ(q.ah_attr.flow_label, 1u);
}

TEST_F(QpPathMigrationTest, ForcedMigrationMovesToTheAlternateAndRaisesPathMig) {
  ToRts(attr::kAltPath | attr::kPathMigState, Alt());
  QpAttributes m;
  m.path_mig_state = M::kMigrated;
  ASSERT_TRUE(qp_->Modify(m, attr::kPathMigState).ok());
  const QpAttributes q = qp_->Query();
  EXPECT_EQ(q.path_mig_state, M::kMigrated);
  EXPECT_EQ(q.ah_attr.flow_label, 2u);   // the alternate is the primary now
  EXPECT_EQ(q.timeout, 9);
  EXPECT_EQ(q.alt_ah_attr.flow_label, 1u);
  auto e = context_->GetAsyncEvent();
  ASSERT_TRUE(e.ok()) << e.status().rule();
  EXPECT_EQ(e->type, kEventPathMig);
  EXPECT_EQ(e->subject, AsyncEvent::Subject::kQp);
  // REARM without a new path arms the way back.
  m.path_mig_state = M::kRearm;
  ASSERT_TRUE(qp_->Modify(m, attr::kPathMigState).ok());
  EXPECT_EQ(qp_->Query().path_mig_state, M::kArmed);
}

TEST_F(QpPathMigrationTest, ARefusedRequestLeavesTheAlternatePathAsItWas) {
  ToRts(0, QpAttributes{});
  QpAttributes bad = Alt();
  bad.qp_access_flags = 1u << 20;  // not a QP access bit: the whole request is refused
  Status s = qp_->Modify(bad, attr::kAltPath | attr::kPathMigState | attr::kAccessFlags);
  EXPECT_EQ(s.code(), EINVAL);
  QpAttributes q = qp_->Query();
  EXPECT_EQ(q.path_mig_state, M::kMigrated);
  EXPECT_EQ(q.alt_port_num, 0);
  // Without an alternate path a REARM is refused, and MIGRATED is what every QP already is.
  QpAttributes m;
  m.path_mig_state = M::kRearm;
  EXPECT_EQ(qp_->Modify(m, attr::kPathMigState).code(), EINVAL);
  m.path_mig_state = M::kMigrated;
  EXPECT_TRUE(qp_->Modify(m, attr::kPathMigState).ok());
}

}  // namespace
}  // namespace softverbs::core
