// The ibv_qp_ex work-request builders (ibv_wr_post(3)). Every pointer is filled so no program
// ever calls through NULL; a builder whose op was not requested in send_ops_flags at creation
// marks the batch refused, and wr_complete reports the first refusal.
#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"

namespace softverbs::abi {
namespace {

// Records the first refusal of the current batch.
void Refuse(ibv_qp_ex* qpx, Status status) {
  SvQp* qp = ToSv(qpx);
  if (qp->batch_status.ok()) qp->batch_status = std::move(status);
}

// Builders of operations: checked against send_ops_flags; posting itself arrives with the data
// path (docs/support-matrix.md), so an accepted op still refuses the batch with EOPNOTSUPP.
void Op(ibv_qp_ex* qpx, uint64_t flag, const char* name) {
  if (!(ToSv(qpx)->send_ops_flags & flag))
    return Refuse(qpx, Invalid(std::string(name) + " was not requested in send_ops_flags at creation"));
  Refuse(qpx, Unsupported("posting through ibv_qp_ex (the data path)"));
}

void WrStart(ibv_qp_ex* qpx) { ToSv(qpx)->batch_status = Status::Ok(); }
int WrComplete(ibv_qp_ex* qpx) {
  SvQp* qp = ToSv(qpx);
  Status s = std::exchange(qp->batch_status, Status::Ok());
  return s.ok() ? 0 : ReturnErrno("ibv_wr_complete", Name(&qpx->qp_base), s);
}
void WrAbort(ibv_qp_ex* qpx) { ToSv(qpx)->batch_status = Status::Ok(); }

void AtomicCmpSwp(ibv_qp_ex* q, uint32_t, uint64_t, uint64_t, uint64_t) {
  Op(q, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, "ibv_wr_atomic_cmp_swp");
}
void AtomicFetchAdd(ibv_qp_ex* q, uint32_t, uint64_t, uint64_t) {
  Op(q, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, "ibv_wr_atomic_fetch_add");
}
void BindMw(ibv_qp_ex* q, ibv_mw*, uint32_t, const ibv_mw_bind_info*) { Op(q, IBV_QP_EX_WITH_BIND_MW, "ibv_wr_bind_mw"); }
void LocalInv(ibv_qp_ex* q, uint32_t) { Op(q, IBV_QP_EX_WITH_LOCAL_INV, "ibv_wr_local_inv"); }
void RdmaRead(ibv_qp_ex* q, uint32_t, uint64_t) { Op(q, IBV_QP_EX_WITH_RDMA_READ, "ibv_wr_rdma_read"); }
void RdmaWrite(ibv_qp_ex* q, uint32_t, uint64_t) { Op(q, IBV_QP_EX_WITH_RDMA_WRITE, "ibv_wr_rdma_write"); }
void RdmaWriteImm(ibv_qp_ex* q, uint32_t, uint64_t, __be32) {
  Op(q, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, "ibv_wr_rdma_write_imm");
}
void Send(ibv_qp_ex* q) { Op(q, IBV_QP_EX_WITH_SEND, "ibv_wr_send"); }
void SendImm(ibv_qp_ex* q, __be32) { Op(q, IBV_QP_EX_WITH_SEND_WITH_IMM, "ibv_wr_send_imm"); }
void SendInv(ibv_qp_ex* q, uint32_t) { Op(q, IBV_QP_EX_WITH_SEND_WITH_INV, "ibv_wr_send_inv"); }
void SendTso(ibv_qp_ex* q, void*, uint16_t, uint16_t) { Op(q, IBV_QP_EX_WITH_TSO, "ibv_wr_send_tso"); }
void AtomicWrite(ibv_qp_ex* q, uint32_t, uint64_t, const void*) {
  Op(q, IBV_QP_EX_WITH_ATOMIC_WRITE, "ibv_wr_atomic_write");
}

// Setters only complete the op before them; they refuse nothing by themselves.
void SetUdAddr(ibv_qp_ex*, ibv_ah*, uint32_t, uint32_t) {}
void SetXrcSrqn(ibv_qp_ex* q, uint32_t) { Refuse(q, Unsupported("ibv_wr_set_xrc_srqn (XRC)")); }
void SetInlineData(ibv_qp_ex*, void*, size_t) {}
void SetInlineDataList(ibv_qp_ex*, size_t, const ibv_data_buf*) {}
void SetSge(ibv_qp_ex*, uint32_t, uint64_t, uint32_t) {}
void SetSgeList(ibv_qp_ex*, size_t, const ibv_sge*) {}

}  // namespace

void InitQpEx(SvQp* qp, uint64_t send_ops_flags) {
  qp->send_ops_flags = send_ops_flags;
  ibv_qp_ex& x = qp->qpx;
  x.comp_mask = 0;
  x.wr_id = 0;
  x.wr_flags = 0;
  x.wr_atomic_cmp_swp = AtomicCmpSwp;
  x.wr_atomic_fetch_add = AtomicFetchAdd;
  x.wr_bind_mw = BindMw;
  x.wr_local_inv = LocalInv;
  x.wr_rdma_read = RdmaRead;
  x.wr_rdma_write = RdmaWrite;
  x.wr_rdma_write_imm = RdmaWriteImm;
  x.wr_send = Send;
  x.wr_send_imm = SendImm;
  x.wr_send_inv = SendInv;
  x.wr_send_tso = SendTso;
  x.wr_set_ud_addr = SetUdAddr;
  x.wr_set_xrc_srqn = SetXrcSrqn;
  x.wr_set_inline_data = SetInlineData;
  x.wr_set_inline_data_list = SetInlineDataList;
  x.wr_set_sge = SetSge;
  x.wr_set_sge_list = SetSgeList;
  x.wr_start = WrStart;
  x.wr_complete = WrComplete;
  x.wr_abort = WrAbort;
  x.wr_atomic_write = AtomicWrite;
}

}  // namespace softverbs::abi
