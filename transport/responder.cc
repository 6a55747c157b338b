#include "transport/responder.h"

#include <atomic>
#include <cstring>

#include "base/log.h"
#include "fabric/host/token_lock.h"
#include "transport/completion.h"
#include "transport/cq_ring.h"
#include "transport/key_table.h"
#include "transport/mapped_copy.h"
#include "transport/recv_queue.h"
#include "transport/window_key.h"

namespace softverbs::transport {
namespace {

// enum ibv_qp_state / ibv_qp_type / ibv_access_flags values the responder checks.
constexpr uint32_t kRtr = 2, kRts = 3, kSqd = 4, kSqe = 5;
constexpr uint32_t kRc = 2, kUd = 4;
constexpr uint32_t kLocalWrite = 1u << 0, kRemoteWrite = 1u << 1, kRemoteRead = 1u << 2, kRemoteAtomic = 1u << 3;

// IBA 10.3.1: a QP receives in RTR, RTS, SQD and SQE.
bool CanReceive(uint32_t state) { return state == kRtr || state == kRts || state == kSqd || state == kSqe; }

Reply NotReceiving(uint32_t qp_type) { return qp_type == kRc ? Reply::kNotReady : Reply::kDropped; }

// A responder-side error moves an RC target QP to ERR (IBA 9.9.3: responder class C/D errors);
// its owner applies it on its next verb.
void FailTarget(const Target& t) {
  // A DCT serves many initiators: the faulty request's DCI gets the NAK, the DCT keeps serving.
  if (t.endpoint().type != kRc || t.endpoint().dct) return;
  t.endpoint().remote_error.store(1, std::memory_order_release);
  if (auto* ring = static_cast<CqRing*>(t.Resolve(t.endpoint().recv_cq)))
    ring->attention.store(1, std::memory_order_release);
  // The owner learns it through its async event fd even if it makes no verb call.
  if (t.endpoint().async_fd >= 0) t.Signal(t.endpoint().async_fd, t.endpoint().async_tag);
}

// Completes a receive WQE on the target's receive CQ and wakes its channel if armed.
// A copy that failed because the target process died is a target that does not answer (the
// requester's transport retry then reports it); any other failure is the target's fault.
Reply CopyFailed(const Status& s) { return s.code() == ESRCH ? Reply::kNotReady : Reply::kRemoteOp; }

template <typename Fill>
void CompleteAtTarget(const Target& t, const Completion& c, Fill&& fill) {
  auto* ring = static_cast<CqRing*>(t.Resolve(t.endpoint().recv_cq));
  if (ring == nullptr) return;
  PushOutcome out = CqRingPush(*ring, c, [&t](fabric::SharedRef ref) { return t.Resolve(ref); }, fill);
  if (out.notify_fd >= 0) t.Signal(out.notify_fd, out.notify_tag);
  // A full CQ lost the completion: the owner learns it as IBV_EVENT_CQ_ERR even if it is blocked
  // in ibv_get_async_event (the ring's overrun flag says which CQ).
  if (!out.stored && t.endpoint().async_fd >= 0) t.Signal(t.endpoint().async_fd, t.endpoint().async_tag);
}

void CompleteAtTarget(const Target& t, const Completion& c) {
  CompleteAtTarget(t, c, [](CqEntry&) {});
}

// Copies the gather list into a landing (transport/cq_ring.h); the owner's poll scatters it.
void FillLanding(CqEntry& e, const iovec* gather, size_t ng, const ScatterList& scatter) {
  uint8_t* to = e.landing;
  for (size_t i = 0; i < ng; ++i) {
    memcpy(to, gather[i].iov_base, gather[i].iov_len);
    to += gather[i].iov_len;
  }
  e.landing_length = static_cast<uint32_t>(to - e.landing);
  const iovec* piece = scatter.pieces.data();
  e.landing_pieces = static_cast<uint32_t>(scatter.pieces.size());
  for (size_t i = 0; i < scatter.pieces.size(); ++i)
    e.piece[i] = {reinterpret_cast<uint64_t>(piece[i].iov_base), static_cast<uint32_t>(piece[i].iov_len),
                  scatter.lkey[i]};
}

// Moves the bytes between `local` and the target's pinned `remote` pieces: memcpy through a
// mapping when the target's memory is a shared file it registered (transport/mapped_copy.h),
// process_vm_writev/readv otherwise. The one place where bytes of another process move.
Status MoveBytes(fabric::HostRegistry& registry, const Target& t, bool write, const iovec* local, size_t nl,
                 const PinnedPieces& remote) {
  if (MappedPieces mapped; mapped.Map(registry, fabric::BackingMaps::ForThisProcess(), t, remote)) {
    CopyMapped(write, local, nl, mapped.data(), mapped.size());
    return Status::Ok();
  }
  return CopyInChunks(local, nl, remote.data(), remote.size(),
                      [&t, write](const iovec* l, size_t ln, const iovec* r, size_t rn) {
                        return write ? t.WriteV(l, ln, r, rn) : t.ReadV(l, ln, r, rn);
                      });
}

}  // namespace

Reply Responder::CheckRemote(const Target& t, uint32_t rkey, uint64_t remote_addr, uint64_t length,
                             uint32_t access, PinnedPieces* pieces) {
  const QpEndpoint& e = t.endpoint();
  // IBA 10.6.3 / 9.7.5.1.3: the QP must allow the operation, and the R_Key must be valid, be
  // the target's, belong to the QP's PD, allow the access and cover the whole range.
  if (!(e.access & access)) return Reply::kRemoteAccess;
  const KeyRule rule{t.process_slot(), e.pd, access, access != kRemoteRead, /*remote=*/true, e.qp_num};
  if (!ResolveKey(local_.registry(), rkey, remote_addr, length, length, rule,
                  [&t](fabric::SharedRef ref) { return t.Resolve(ref); }, pieces))
    return Reply::kRemoteAccess;
  return Reply::kAck;
}

Reply Responder::Deliver(const Target& t, uint32_t qp_type, const iovec* local, size_t nl, uint64_t total,
                         const MessageInfo& info) {
  QpEndpoint& e = t.endpoint();
  if (e.type != qp_type || !CanReceive(e.state.load(std::memory_order_acquire))) return NotReceiving(qp_type);
  auto* rq = static_cast<RecvRing*>(t.Resolve(e.recv_queue));
  if (rq == nullptr) return NotReceiving(qp_type);
  TakenWqe w = RecvRingTake(*rq, [&t](fabric::SharedRef ref) { return t.Resolve(ref); });
  if (w.limit_crossed && rq->async_fd >= 0) t.Signal(rq->async_fd, rq->async_tag);  // IBV_EVENT_SRQ_LIMIT_REACHED
  // No WQE: RC answers RNR NAK (IBA 9.7.5.2.8); UC and UD drop the message (IBA 9.8.3, 9.6.3).
  // A target whose process died answers nothing at all (its endpoint still reads as it was).
  if (!w.found) {
    if (!t.IsAlive()) return NotReceiving(qp_type);
    return qp_type == kRc ? Reply::kRnr : Reply::kDropped;
  }

  Completion c;
  c.wr_id = w.wr_id;
  c.qp_num = e.qp_num;
  c.src_qp = info.src_qp;
  c.opcode = info.rdma_write ? wc_opcode::kRecvRdmaWithImm : wc_opcode::kRecv;
  c.imm_data = info.imm_data;
  c.wc_flags = (info.with_imm ? wc_flag::kWithImm : 0) | (info.grh ? wc_flag::kGrh : 0);
  c.solicited = info.solicited;
  const uint64_t need = total + (info.grh ? 40 : 0);
  c.byte_len = static_cast<uint32_t>(need);
  if (info.rdma_write) {  // WRITE_WITH_IMM consumes the WQE without touching its buffers
    CompleteAtTarget(t, c);
    return Reply::kAck;
  }

  // A small message for another process lands in the completion itself (no system call); its
  // buffers are written later by the owner's poll, which checks them again, so here they are
  // only checked. Anything else is copied now, its buffers pinned.
  bool landing = !t.is_self() && need <= kLandingBytes;
  ScatterList scatter;
  Reply r = Scatter(t, w, need, landing, &scatter);
  if (r == Reply::kAck && landing && (scatter.indirect || scatter.pieces.size() > kLandingPieces)) {
    // Too many pieces to land, or an indirect key (whose layout the owner's poll would have to
    // walk again): copy after all.
    landing = false;
    r = Scatter(t, w, need, false, &scatter);
  }
  if (r != Reply::kAck) {
    // IBA 10.6.3.1 / 9.9.3.1.2: a receive buffer the target may not write is a local protection
    // error at the target; one too small, a local length error there and an invalid request
    // for the sender. Either way the target QP enters ERR.
    c.status = r == Reply::kInvalidRequest ? wc_status::kLocLenErr : wc_status::kLocProtErr;
    c.byte_len = 0;
    CompleteAtTarget(t, c);
    FailTarget(t);
    return r;
  }
  if (info.invalidate) {
    // IBA 10.6.7.2.2: SEND with Invalidate invalidates a type 2 window of the target bound to the
    // target QP before its receive completes. Any other R_Key makes it an invalid request for
    // the sender; the target's receive completes in error.
    if (!RemoteInvalidate(local_.registry(), info.invalidate_rkey, t.process_slot(), e.qp_num)) {
      SV_LOG(kError, "SEND_WITH_INV to qp 0x%x: R_Key 0x%x is not a type 2 window bound to that QP: "
             "IBV_WC_LOC_PROT_ERR at the target, IBV_WC_REM_INV_REQ_ERR at the sender", e.qp_num, info.invalidate_rkey);
      c.status = wc_status::kLocProtErr;
      c.byte_len = 0;
      CompleteAtTarget(t, c);
      FailTarget(t);
      return Reply::kInvalidRequest;
    }
    c.wc_flags |= wc_flag::kWithInv;
    c.imm_data = info.invalidate_rkey;  // ibv_wc.invalidated_rkey shares imm_data's place
  }
  // The message's bytes: the GRH, then the sender's pieces (more than kMaxSge through an
  // indirect key).
  iovec fixed[kMaxSge + 1];
  std::vector<iovec> grown;
  iovec* gather = fixed;
  if (nl > kMaxSge) {
    grown.resize(nl + 1);
    gather = grown.data();
  }
  size_t ng = 0;
  if (info.grh) gather[ng++] = {const_cast<uint8_t*>(info.grh), 40};
  for (size_t i = 0; i < nl; ++i) gather[ng++] = local[i];
  if (landing) {
    // (A full receive CQ loses the completion either way: an overrun, IBA 11.4.2.1.)
    CompleteAtTarget(t, c, [&](CqEntry& entry) { FillLanding(entry, gather, ng, scatter); });
    return Reply::kAck;
  }
  if (Status s = need > 0 ? MoveBytes(local_.registry(), t, true, gather, ng, scatter.pieces) : Status::Ok();
      !s.ok()) {
    if (s.code() == ESRCH) return Reply::kNotReady;
    c.status = wc_status::kLocProtErr;
    c.byte_len = 0;
    CompleteAtTarget(t, c);
    FailTarget(t);
    return Reply::kRemoteOp;
  }
  CompleteAtTarget(t, c);
  return Reply::kAck;
}

Reply Responder::Scatter(const Target& t, const TakenWqe& w, uint64_t need, bool peek_only, ScatterList* out) {
  // The WQE's scatter list, checked like any local access of the target: its keys, its PD,
  // LOCAL_WRITE, in bounds (IBA 10.6.3.1). kAck, kRemoteOp (a bad SGE) or kInvalidRequest
  // (the message does not fit).
  const QpEndpoint& e = t.endpoint();
  out->pieces.Clear();
  out->indirect = false;
  const KeyRule rule{t.process_slot(), e.pd, kLocalWrite, true};
  uint64_t room = 0;
  for (uint32_t i = 0; i < w.num_sge && room < need; ++i) {
    const RecvSge& s = w.sge[i];
    if (s.length == 0) continue;
    const uint64_t take = std::min<uint64_t>(s.length, need - room);
    room += take;
    if (!peek_only) {
      if (!ResolveKey(local_.registry(), s.lkey, s.addr, s.length, take, rule,
                      [&t](fabric::SharedRef ref) { return t.Resolve(ref); }, &out->pieces))
        return Reply::kRemoteOp;
      continue;
    }
    KeyView k;
    if (!KeyPin::Peek(local_.registry(), s.lkey, &k)) return Reply::kRemoteOp;
    if (k.indirect()) {
      out->indirect = true;  // checked when scattered for real (never landed)
      continue;
    }
    if (!KeyAdmits(k, rule) || s.addr < k.iova || s.length > k.length || s.addr - k.iova > k.length - s.length)
      return Reply::kRemoteOp;
    out->lkey[out->pieces.size()] = s.lkey;
    out->pieces.Add({reinterpret_cast<void*>(k.addr + (s.addr - k.iova)), take});
  }
  return room < need ? Reply::kInvalidRequest : Reply::kAck;
}

Reply Responder::Rdma(const Target& t, bool write, uint32_t rkey, uint64_t remote_addr, const iovec* local,
                      size_t nl, uint64_t total) {
  const QpEndpoint& e = t.endpoint();
  if (!CanReceive(e.state.load(std::memory_order_acquire))) return NotReceiving(e.type);
  // IBA 9.7.5.1.4: a responder with no resources for RDMA READ (max_dest_rd_atomic 0) refuses it.
  if (!write && e.max_dest_rd_atomic == 0) {
    FailTarget(t);
    return Reply::kInvalidRequest;
  }
  if (total == 0) return Reply::kAck;  // IBA 9.4.3.1 / 9.4.4: a zero-length transfer checks no R_Key
  PinnedPieces remote;
  if (Reply r = CheckRemote(t, rkey, remote_addr, total, write ? kRemoteWrite : kRemoteRead, &remote);
      r != Reply::kAck) {
    FailTarget(t);
    return r;
  }
  Status s = MoveBytes(local_.registry(), t, write, local, nl, remote);
  return s.ok() ? Reply::kAck : CopyFailed(s);
}

Reply Responder::Write(const Target& t, uint32_t rkey, uint64_t remote_addr, const iovec* local, size_t nl,
                       uint64_t total) {
  return Rdma(t, true, rkey, remote_addr, local, nl, total);
}

Reply Responder::Read(const Target& t, uint32_t rkey, uint64_t remote_addr, const iovec* local, size_t nl,
                      uint64_t total) {
  return Rdma(t, false, rkey, remote_addr, local, nl, total);
}

Reply Responder::Atomic(const Target& t, WrOpcode op, uint32_t rkey, uint64_t remote_addr, uint64_t compare_add,
                        uint64_t swap, uint64_t* original) {
  const QpEndpoint& e = t.endpoint();
  if (!CanReceive(e.state.load(std::memory_order_acquire))) return NotReceiving(e.type);
  if (e.max_dest_rd_atomic == 0) {  // no responder resources for atomics either
    FailTarget(t);
    return Reply::kInvalidRequest;
  }
  // IBA 9.4.5: atomics operate on naturally aligned 8 bytes.
  if (remote_addr % 8 != 0) {
    FailTarget(t);
    return Reply::kInvalidRequest;
  }
  PinnedPieces pieces;
  if (Reply r = CheckRemote(t, rkey, remote_addr, 8, kRemoteAtomic, &pieces); r != Reply::kAck) {
    FailTarget(t);
    return r;
  }
  // Through an indirect key the 8 bytes must be one naturally aligned word of one underlying MR:
  // the responder cannot apply an atomic to bytes of two places at once. Like a misaligned
  // address it is an invalid request (IBA 9.4.5: atomics act on naturally aligned 8 bytes; the
  // responder NAKs what it cannot execute with Invalid Request, 9.7.5.2.2).
  const uint64_t va = reinterpret_cast<uint64_t>(pieces.data()[0].iov_base);
  if (pieces.size() != 1 || va % 8 != 0) {
    FailTarget(t);
    return Reply::kInvalidRequest;
  }
  // IBV_ATOMIC_HCA: atomic against every other atomic through softverbs on this host. The lock
  // stripe is chosen by (process, address) so all initiators meet on the same word.
  const uint64_t stripe = (static_cast<uint64_t>(t.process_slot()) * 0x9E3779B97F4A7C15ull) ^ (va >> 3);
  fabric::TokenLock lock(local_.registry().atomic_stripe(static_cast<uint32_t>(stripe ^ (stripe >> 29))),
                         local_.token());
  uint64_t value = 0;
  iovec mine{&value, 8};
  iovec remote{reinterpret_cast<void*>(va), 8};
  // The word through a mapping of the target's shared backing, if it has one (the same lock).
  MappedPieces mapped;
  auto* word = mapped.Map(local_.registry(), fabric::BackingMaps::ForThisProcess(), t, pieces)
                   ? static_cast<uint64_t*>(mapped.data()[0].iov_base)
                   : nullptr;
  if (word != nullptr)
    value = std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire);
  else if (Status s = t.ReadV(&mine, 1, &remote, 1); !s.ok())
    return CopyFailed(s);
  *original = value;
  uint64_t next = op == WrOpcode::kAtomicCmpSwp ? (value == compare_add ? swap : value) : value + compare_add;
  if (next != value) {
    iovec out{&next, 8};
    if (word != nullptr)
      std::atomic_ref<uint64_t>(*word).store(next, std::memory_order_release);
    else if (Status s = t.WriteV(&out, 1, &remote, 1); !s.ok())
      return CopyFailed(s);
  }
  return Reply::kAck;
}

}  // namespace softverbs::transport
