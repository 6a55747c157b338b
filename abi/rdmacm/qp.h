// The QP of an identifier (rdma_create_qp(3)): the cm/ protocol drives it through this
// QpDriver at the moments the IBA CM would, with ibv_modify_qp(3)'s attribute masks.
#pragma once

#include <infiniband/verbs.h>

#include "cm/id.h"

namespace softverbs::abi::rdmacm {

struct CmId;

class CmQp : public cm::QpDriver {
 public:
  CmQp(ibv_qp* qp, CmId* owner) : qp_(qp), owner_(owner) {}
  uint32_t qp_num() const override { return qp_->qp_num; }
  Status ToRtrRts(const cm::ConnectedPath& path) override;
  Status ToError() override;
  Status Attach(const cm::Gid& mgid) override;
  Status Detach(const cm::Gid& mgid) override;
  Status TakeResponseEce(const cm::Ece& ece) override;
  ibv_qp* qp() const { return qp_; }

 private:
  ibv_qp* qp_;
  CmId* owner_;
  bool response_ece_ = false;  // a REP's ECE was set: read back the agreed options after RTS
};

// The attributes and mask of `state` for a QP of `type` on this path (rdma_init_qp_attr(3)).
void PathToAttr(const cm::ConnectedPath& path, ibv_qp_type type, ibv_qp_state state,
                ibv_qp_attr* attr, int* mask);
// Access flags a connected QP gets at INIT/RTR: REMOTE_WRITE, plus READ and ATOMIC when it
// serves RDMA READ/atomics (the kernel CM's cm_init_qp_init_attr does the same).
int ConnectedAccess(ibv_qp_type type, uint8_t max_dest_rd_atomic);

}  // namespace softverbs::abi::rdmacm
