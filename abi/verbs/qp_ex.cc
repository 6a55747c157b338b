// The ibv_qp_ex work-request builders (ibv_wr_post(3)): ibv_wr_start opens a batch, each op
// (ibv_wr_send, ibv_wr_rdma_write, ...) starts a work request that the setters (ibv_wr_set_sge,
// _inline_data, _ud_addr) complete, and ibv_wr_complete posts the batch -- or nothing, if any
// builder was refused; ibv_wr_abort drops it. Every pointer is filled: an op whose flag was not
// requested in send_ops_flags at creation refuses the batch (EINVAL at ibv_wr_complete).
#include <cstring>

#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"

namespace softverbs::abi {
namespace {

using transport::SendWr;
using transport::WrOpcode;

// Records the first refusal of the current batch.
void Refuse(ibv_qp_ex* qpx, Status status) {
  SvQp* qp = ToSv(qpx);
  if (qp->batch_status.ok()) qp->batch_status = std::move(status);
}

// Starts the next work request of the batch, if the op was requested at creation.
SendWr* Begin(ibv_qp_ex* qpx, uint64_t flag, const char* name, WrOpcode op) {
  SvQp* qp = ToSv(qpx);
  // mlx5dv_wr_mkey_configure(3): "num_setters is a number of required setters for the WR".
  if (qp->mkey_config.open) {
    Refuse(qpx, Invalid(std::string(name) + " started before the " + std::to_string(qp->mkey_config.num_setters) +
                        " setters mlx5dv_wr_mkey_configure announced were called"));
    return nullptr;
  }
  if (!(qp->send_ops_flags & flag)) {
    Refuse(qpx, Invalid(std::string(name) + " was not requested in send_ops_flags at creation"));
    return nullptr;
  }
  SvQp::BatchedWr& b = qp->batch.emplace_back();
  b.wr.wr_id = qpx->wr_id;
  b.wr.flags = qpx->wr_flags;
  b.wr.opcode = op;
  return &b.wr;
}

// The work request the setters apply to: the last one started.
SvQp::BatchedWr* Current(ibv_qp_ex* qpx, const char* setter) {
  SvQp* qp = ToSv(qpx);
  if (qp->batch.empty()) {
    Refuse(qpx, Invalid(std::string(setter) + " called before any ibv_wr_* operation"));
    return nullptr;
  }
  return &qp->batch.back();
}

void WrStart(ibv_qp_ex* qpx) {
  SvQp* qp = ToSv(qpx);
  qp->batch.clear();
  qp->mkey_config = {};
  qp->batch_status = Status::Ok();
}

int WrComplete(ibv_qp_ex* qpx) {
  SvQp* qp = ToSv(qpx);
  Status s = std::exchange(qp->batch_status, Status::Ok());
  if (s.ok() && qp->mkey_config.open)
    s = Invalid("mlx5dv_wr_mkey_configure announced " + std::to_string(qp->mkey_config.num_setters) +
                " setters but " + std::to_string(qp->mkey_config.called) +
                " were called (mlx5dv_wr_mkey_configure(3))");
  qp->mkey_config = {};
  // ibv_wr_post(3): the batch is posted under ibv_post_send's rules (core::Qp::PostSend): refused
  // before RTS; on a QP in ERR its WRs complete with a flush error, as mlx5 and rxe accept them.
  for (size_t i = 0; s.ok() && i < qp->batch.size(); ++i) {
    SvQp::BatchedWr& b = qp->batch[i];
    if (!b.inline_data.empty()) {
      b.wr.inline_data = b.inline_data.data();
      b.wr.inline_length = static_cast<uint32_t>(b.inline_data.size());
      b.wr.flags |= IBV_SEND_INLINE;
    }
    if (!b.tso_header.empty()) b.wr.tso_header = b.tso_header.data();
    s = qp->core->PostSend(b.wr);
  }
  qp->core->FlushPosted();  // raw QPs: the batch's frames leave together
  qp->batch.clear();
  return s.ok() ? 0 : ReturnErrno("ibv_wr_complete", Name(&qpx->qp_base), s);
}

void WrAbort(ibv_qp_ex* qpx) {
  SvQp* qp = ToSv(qpx);
  qp->batch.clear();
  qp->mkey_config = {};
  qp->batch_status = Status::Ok();
}

void AtomicCmpSwp(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, "ibv_wr_atomic_cmp_swp", WrOpcode::kAtomicCmpSwp)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->compare_add = compare;
    w->swap = swap;
  }
}
void AtomicFetchAdd(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t add) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, "ibv_wr_atomic_fetch_add", WrOpcode::kAtomicFetchAdd)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->compare_add = add;
  }
}
void RdmaRead(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_RDMA_READ, "ibv_wr_rdma_read", WrOpcode::kRdmaRead)) {
    w->rkey = rkey;
    w->remote_addr = addr;
  }
}
void RdmaWrite(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_RDMA_WRITE, "ibv_wr_rdma_write", WrOpcode::kRdmaWrite)) {
    w->rkey = rkey;
    w->remote_addr = addr;
  }
}
void RdmaWriteImm(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, "ibv_wr_rdma_write_imm", WrOpcode::kRdmaWriteWithImm)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->imm_data = imm;
  }
}
void Send(ibv_qp_ex* q) { Begin(q, IBV_QP_EX_WITH_SEND, "ibv_wr_send", WrOpcode::kSend); }
void SendImm(ibv_qp_ex* q, __be32 imm) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_SEND_WITH_IMM, "ibv_wr_send_imm", WrOpcode::kSendWithImm)) w->imm_data = imm;
}
void BindMw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_BIND_MW, "ibv_wr_bind_mw", WrOpcode::kBindMw)) {
    if (info == nullptr) return Refuse(q, Invalid("ibv_wr_bind_mw: bind_info is NULL"));
    if (Status s = ToBindRequest(mw, rkey, *info, &w->bind); !s.ok()) Refuse(q, std::move(s));
  }
}
void LocalInv(ibv_qp_ex* q, uint32_t rkey) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_LOCAL_INV, "ibv_wr_local_inv", WrOpcode::kLocalInv)) w->invalidate_rkey = rkey;
}
void SendInv(ibv_qp_ex* q, uint32_t rkey) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_SEND_WITH_INV, "ibv_wr_send_inv", WrOpcode::kSendWithInv))
    w->invalidate_rkey = rkey;
}
// TSO (raw packet QPs): the header is copied now, as ibv_wr_send_tso(3) allows its reuse.
void SendTso(ibv_qp_ex* q, void* hdr, uint16_t hdr_sz, uint16_t mss) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_TSO, "ibv_wr_send_tso", WrOpcode::kTso)) {
    if (hdr_sz > 0 && hdr == nullptr) return Refuse(q, Invalid("ibv_wr_send_tso: hdr is NULL"));
    auto& copy = ToSv(q)->batch.back().tso_header;
    copy.assign(static_cast<const uint8_t*>(hdr), static_cast<const uint8_t*>(hdr) + hdr_sz);
    w->tso_header = copy.data();
    w->tso_header_size = hdr_sz;
    w->tso_mss = mss;
  }
}
// ibv_wr_atomic_write(3): "atomic_wr" points at the 8 bytes to write, read now (as rxe's
// wr_atomic_write copies them into the WQE); they travel as the WR's inline data.
void AtomicWrite(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, const void* atomic_wr) {
  if (SendWr* w = Begin(q, IBV_QP_EX_WITH_ATOMIC_WRITE, "ibv_wr_atomic_write", WrOpcode::kAtomicWrite)) {
    w->rkey = rkey;
    w->remote_addr = addr;
    w->num_sge = 0;
    const auto* bytes = static_cast<const uint8_t*>(atomic_wr);
    ToSv(q)->batch.back().inline_data.assign(bytes, bytes + 8);
  }
}

void SetUdAddr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  if (auto* b = Current(q, "ibv_wr_set_ud_addr")) {
    b->wr.ud = ToSv(ah)->ud;
    b->wr.ud.remote_qpn = remote_qpn;
    b->wr.ud.remote_qkey = remote_qkey;
  }
}
void SetXrcSrqn(ibv_qp_ex* q, uint32_t remote_srqn) {
  if (auto* b = Current(q, "ibv_wr_set_xrc_srqn")) b->wr.xrc_srqn = remote_srqn;
}
void SetInlineData(ibv_qp_ex* q, void* addr, size_t length) {
  if (auto* b = Current(q, "ibv_wr_set_inline_data")) {
    // Copied now: the buffer may be reused as soon as the setter returns (ibv_wr_post(3)).
    auto* p = static_cast<uint8_t*>(addr);
    b->inline_data.assign(p, p + length);
    b->wr.num_sge = 0;
  }
}
void SetInlineDataList(ibv_qp_ex* q, size_t num_buf, const ibv_data_buf* bufs) {
  if (auto* b = Current(q, "ibv_wr_set_inline_data_list")) {
    b->inline_data.clear();
    for (size_t i = 0; i < num_buf; ++i) {
      auto* p = static_cast<uint8_t*>(bufs[i].addr);
      b->inline_data.insert(b->inline_data.end(), p, p + bufs[i].length);
    }
    b->wr.num_sge = 0;
  }
}
void SetSge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
  if (auto* b = Current(q, "ibv_wr_set_sge")) {
    b->wr.num_sge = 1;
    b->wr.sge[0] = {addr, length, lkey};
  }
}
void SetSgeList(ibv_qp_ex* q, size_t num_sge, const ibv_sge* sges) {
  if (auto* b = Current(q, "ibv_wr_set_sge_list")) {
    if (num_sge > transport::kMaxSge) return Refuse(q, Invalid("num_sge exceeds max_sge"));
    b->wr.num_sge = static_cast<uint32_t>(num_sge);
    for (size_t i = 0; i < num_sge; ++i) b->wr.sge[i] = {sges[i].addr, sges[i].length, sges[i].lkey};
  }
}

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
