// ibv_post_send, ibv_post_recv, ibv_post_srq_recv (ibv_post_send(3), ibv_post_recv(3)): the
// work requests are converted one by one; the first refused one is returned in *bad_wr and
// nothing after it is posted.
#include <cstddef>
#include <cstring>

#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"

namespace softverbs::abi {
namespace {

// IBV_SEND_INLINE on SEND and WRITE (ibv_post_send(3)): the bytes are read from the SGE
// addresses now; lkeys are not checked. On READ and atomics the flag is ignored (as mlx5 does)
// and their SGEs stay SGEs, checked against their lkeys when executed. A gather list is
// flattened into one buffer the requester copies if it must wait.
Status CopyInline(const ibv_send_wr& in, transport::SendWr* out) {
  static thread_local uint8_t buffer[transport::kMaxInlineData];
  uint64_t length = 0;
  for (int i = 0; i < in.num_sge; ++i) length += in.sg_list[i].length;
  if (length > sizeof(buffer)) return Invalid("inline data exceeds max_inline_data");
  size_t at = 0;
  for (int i = 0; i < in.num_sge; ++i) {
    // An empty SGE may carry address 0 (UCX posts one for a message without payload), and
    // memcpy from a null pointer is undefined even for 0 bytes (C11 7.24.1p2).
    if (in.sg_list[i].length == 0) continue;
    memcpy(buffer + at, reinterpret_cast<const void*>(in.sg_list[i].addr), in.sg_list[i].length);
    at += in.sg_list[i].length;
  }
  out->inline_data = buffer;
  out->inline_length = static_cast<uint32_t>(length);
  return Status::Ok();
}

// The TSO header is read now (ibv_post_send(3): like inline data); the payload is the SGEs.
Status CopyTsoHeader(const ibv_send_wr& in, transport::SendWr* out) {
  static thread_local uint8_t header[65535];
  if (in.tso.hdr_sz > 0 && in.tso.hdr == nullptr) return Invalid("IBV_WR_TSO with hdr_sz and no hdr");
  if (in.tso.hdr_sz > 0) memcpy(header, in.tso.hdr, in.tso.hdr_sz);
  out->tso_header = header;
  out->tso_header_size = in.tso.hdr_sz;
  out->tso_mss = in.tso.mss;
  return Status::Ok();
}

static_assert(sizeof(ibv_sge) == sizeof(transport::Sge) && offsetof(ibv_sge, addr) == offsetof(transport::Sge, addr) &&
              offsetof(ibv_sge, length) == offsetof(transport::Sge, length) &&
              offsetof(ibv_sge, lkey) == offsetof(transport::Sge, lkey));

// RETH and AtomicETH of `in` into a transport::SendWr or transport::LaneWr (the same names).
template <typename Wr>
void CopyRdma(const ibv_send_wr& in, Wr* out) {
  out->remote_addr = in.wr.rdma.remote_addr;
  out->rkey = in.wr.rdma.rkey;
}
template <typename Wr>
void CopyAtomic(const ibv_send_wr& in, Wr* out) {
  out->remote_addr = in.wr.atomic.remote_addr;
  out->rkey = in.wr.atomic.rkey;
  out->compare_add = in.wr.atomic.compare_add;
  out->swap = in.wr.atomic.swap;
}

// Copies what the transport reads of `in`: the fields of every opcode, then those of its own
// opcode only (a WRITE's SendWr never holds atomic operands); the rest keep their defaults.
Status ToTransport(const ibv_send_wr& in, transport::SendWr* out) {
  if (in.num_sge < 0 || in.num_sge > static_cast<int>(transport::kMaxSge)) [[unlikely]]
    return Invalid("num_sge " + std::to_string(in.num_sge) + " is outside 0..max_sge");
  out->wr_id = in.wr_id;
  out->opcode = static_cast<transport::WrOpcode>(in.opcode);
  out->flags = in.send_flags;
  out->imm_data = in.imm_data;  // also invalidate_rkey (a union)
  out->num_sge = static_cast<uint32_t>(in.num_sge);
  // ibv_sge and transport::Sge have one layout (asserted above): copied as they are, the count
  // and the list read once.
  const int n = in.num_sge;
  const ibv_sge* sg = in.sg_list;
  for (int i = 0; i < n; ++i) memcpy(&out->sge[i], &sg[i], sizeof(transport::Sge));
  if ((in.send_flags & IBV_SEND_INLINE) && transport::CarriesData(out->opcode))
    SV_RETURN_IF_ERROR(CopyInline(in, out));
  switch (in.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_WRITE:  // its 8 bytes are the SGEs' (or inline), as an RDMA WRITE's
      CopyRdma(in, out);
      return Status::Ok();
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      CopyAtomic(in, out);
      return Status::Ok();
    case IBV_WR_LOCAL_INV:
    case IBV_WR_SEND_WITH_INV:
      out->invalidate_rkey = in.invalidate_rkey;
      return Status::Ok();
    case IBV_WR_BIND_MW:
      return ToBindRequest(in.bind_mw.mw, in.bind_mw.rkey, in.bind_mw.bind_info, &out->bind);
    case IBV_WR_TSO:
      return CopyTsoHeader(in, out);
    default:
      return Status::Ok();
  }
}

// A SEND, SEND with immediate, RDMA WRITE, READ or atomic with one SGE, as the requester's lane
// takes it (transport::LaneWr, value-initialized by the caller: the fields of other opcodes stay
// 0): false for anything else.
bool ToLaneWr(const ibv_send_wr& in, transport::LaneWr* out) {
  if (in.num_sge != 1) return false;
  switch (in.opcode) {
    case IBV_WR_SEND:
      break;
    case IBV_WR_SEND_WITH_IMM:
      out->imm_data = in.imm_data;
      break;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_READ:
      CopyRdma(in, out);
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      CopyAtomic(in, out);
      break;
    default:
      return false;
  }
  out->wr_id = in.wr_id;
  out->opcode = static_cast<transport::WrOpcode>(in.opcode);
  out->flags = in.send_flags;
  memcpy(&out->sge, in.sg_list, sizeof(transport::Sge));  // (one layout: asserted above)
  return true;
}

// The destination of a UD send: its address handle's and the WR's.
Status ToUdDestination(const ibv_send_wr& in, transport::SendWr* out) {
  if (in.wr.ud.ah == nullptr) return Invalid("a UD send needs wr.ud.ah");
  out->ud = ToSv(in.wr.ud.ah)->ud;
  out->ud.remote_qpn = in.wr.ud.remote_qpn;
  out->ud.remote_qkey = in.wr.ud.remote_qkey;
  return Status::Ok();
}

}  // namespace

// An ibv_open_qp handle (an XRC_RECV QP) has no queue to post to.
static Status NoQueues(const SvQp* q) {
  return q->core == nullptr ? Invalid("an ibv_open_qp handle of an XRC_RECV QP has no send or receive queue")
                            : Status::Ok();
}

// Posts `wr` and what follows it: each through the requester's lane if it takes it,
// otherwise converted whole (the general way, which decides, answers and logs).
static int PostSendFrom(core::Qp* core, ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  const ibv_qp_type type = qp->qp_type;
  transport::SendWr w;
  for (; wr != nullptr; wr = wr->next) {
    if (transport::LaneWr o{}; ToLaneWr(*wr, &o) && core->PostOnLane(o)) continue;
    Status s = ToTransport(*wr, &w);
    // IBA A14: an XRC message names the SRQ it lands on (XRCETH).
    if (type == IBV_QPT_XRC_SEND) w.xrc_srqn = wr->qp_type.xrc.remote_srqn;
    if (type == IBV_QPT_UD && s.ok()) s = ToUdDestination(*wr, &w);
    if (s.ok()) s = core->PostSend(w);
    if (!s.ok()) [[unlikely]] {
      core->FlushPosted();
      *bad_wr = wr;
      return ReturnErrno("ibv_post_send", Name(qp), s);
    }
  }
  core->FlushPosted();  // raw QPs: the list's frames leave in one batch
  return 0;
}

int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  if (wr == nullptr) return 0;
  core::Qp* core = ToSv(qp)->core.get();
  if (core == nullptr) {
    *bad_wr = wr;
    return ReturnErrno("ibv_post_send", Name(qp), NoQueues(ToSv(qp)));
  }
  // The lane's work requests need no SendWr (~700 bytes to construct): one is made only for the
  // first that is not one of them. (A raw QP, the only one with frames to flush, has no lane.)
  for (; wr != nullptr; wr = wr->next)
    if (transport::LaneWr o{}; !ToLaneWr(*wr, &o) || !core->PostOnLane(o))
      return PostSendFrom(core, qp, wr, bad_wr);
  return 0;
}

static Status ToRecvSges(const ibv_recv_wr& in, transport::RecvSge* out) {
  if (in.num_sge < 0 || in.num_sge > static_cast<int>(transport::kMaxSge))
    return Invalid("num_sge " + std::to_string(in.num_sge) + " is outside 0..max_recv_sge");
  for (int i = 0; i < in.num_sge; ++i) out[i] = {in.sg_list[i].addr, in.sg_list[i].length, in.sg_list[i].lkey};
  return Status::Ok();
}

int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  core::Qp* core = ToSv(qp)->core.get();
  transport::RecvSge sges[transport::kMaxSge];
  for (; wr != nullptr; wr = wr->next) {
    Status s;
    if (wr->num_sge == 1 && core != nullptr) [[likely]] {  // (the usual post: ToRecvSges' checks hold)
      sges[0] = {wr->sg_list[0].addr, wr->sg_list[0].length, wr->sg_list[0].lkey};
      s = core->PostRecv(wr->wr_id, sges, 1);
    } else {
      s = ToRecvSges(*wr, sges);
      if (s.ok()) s = NoQueues(ToSv(qp));
      if (s.ok()) s = core->PostRecv(wr->wr_id, sges, static_cast<uint32_t>(wr->num_sge));
    }
    if (!s.ok()) [[unlikely]] {
      *bad_wr = wr;
      return ReturnErrno("ibv_post_recv", Name(qp), s);
    }
  }
  return 0;
}

int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  transport::RecvSge sges[transport::kMaxSge];
  for (; wr != nullptr; wr = wr->next) {
    Status s;
    if (wr->num_sge == 1) [[likely]] {  // (as PostRecv)
      sges[0] = {wr->sg_list[0].addr, wr->sg_list[0].length, wr->sg_list[0].lkey};
      s = ToSv(srq)->core->queue().Post(wr->wr_id, sges, 1);
    } else {
      s = ToRecvSges(*wr, sges);
      if (s.ok()) s = ToSv(srq)->core->queue().Post(wr->wr_id, sges, static_cast<uint32_t>(wr->num_sge));
    }
    if (!s.ok()) {
      *bad_wr = wr;
      return ReturnErrno("ibv_post_srq_recv", Name(srq), s);
    }
  }
  return 0;
}

}  // namespace softverbs::abi
