// A core::Context for unit tests, on the test host registry (SOFTVERBS_HOST=unit-tests).
#pragma once

#include <cstdlib>
#include <memory>

#include <gtest/gtest.h>

#include "core/context.h"
#include "core/cq.h"
#include "core/pd.h"
#include "core/qp.h"

namespace softverbs::core {

class CoreTest : public ::testing::Test {
 protected:
  CoreTest() {
    setenv("SOFTVERBS_HOST", "unit-tests", 0);
    auto c = Context::Open();
    EXPECT_TRUE(c.ok()) << c.status().rule();
    context_ = std::move(c.value());
    pd_ = std::make_unique<Pd>(*context_, context_->NewHandle());
  }
  // An RC QP of this test's PD whose send and receive CQ is `cq` (16 WRs, one SGE each way).
  std::unique_ptr<Qp> NewRcQp(Cq& cq) {
    QpInitAttributes a;
    a.type = QpType::kRc;
    a.pd = pd_.get();
    a.send_cq = a.recv_cq = &cq;
    a.cap = {16, 16, 1, 1, 0};
    return std::move(Qp::Create(*context_, a).value());
  }
  // `qp` (RC) from RESET through INIT to RTR, connected to QP `dest` at this host's GID 1 and
  // granting `access` (IBV_ACCESS_REMOTE_*): from then on it receives (IBA 10.3.1).
  void ToRtr(Qp& qp, uint32_t dest, uint32_t access) {
    QpAttributes a;
    a.qp_state = QpState::kInit;
    a.port_num = 1;
    a.qp_access_flags = access;
    ASSERT_TRUE(qp.Modify(a, attr::kState | attr::kPkeyIndex | attr::kPort | attr::kAccessFlags).ok());
    a.qp_state = QpState::kRtr;
    a.path_mtu = Mtu::k4096;
    a.dest_qp_num = dest;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = true;
    a.ah_attr.port_num = 1;
    a.ah_attr.sgid_index = 1;
    a.ah_attr.dgid = context_->gids().at(1).gid;
    ASSERT_TRUE(qp.Modify(a, attr::kState | attr::kAv | attr::kPathMtu | attr::kDestQpn | attr::kRqPsn |
                                 attr::kMaxDestRdAtomic | attr::kMinRnrTimer).ok());
  }
  std::unique_ptr<Context> context_;
  std::unique_ptr<Pd> pd_;
};

}  // namespace softverbs::core
