#include "transport/responder.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/big_endian.h"
#include "base/inlined_vector.h"
#include "base/log.h"
#include "transport/codes.h"
#include "transport/cq_ring.h"
#include "transport/dc_access.h"
#include "transport/grh.h"
#include "transport/key_table.h"
#include "transport/receive_keys.h"
#include "transport/responder_imported.h"
#include "transport/responder_signature.h"
#include "transport/window_key.h"

namespace softverbs::transport {
namespace {

// enum ibv_qp_type / ibv_access_flags values the responder checks.
using qp_type::kRc, qp_type::kUd;
using access_bit::kLocalWrite, access_bit::kRemoteWrite, access_bit::kRemoteRead, access_bit::kRemoteAtomic;

// A request the target discards without a word: an RC requester then waits for its ACK timeout
// (IBA 9.7.6.1.3); UC and UD requesters never learn of it.
Reply Silence(const Request& r) { return Reply::Of(r.qp_type == kRc ? ReplyCode::kNoAnswer : ReplyCode::kDropped); }

// A responder-side error moves an RC target QP to ERR (IBA 9.9.3: responder class C/D errors);
// its owner applies it on its next verb, or learns it through its async event fd.
void FailTarget(const TargetQp& t) {
  // A DCT serves many initiators: the faulty request's DCI gets the NAK, the DCT keeps serving.
  if (t.endpoint().type != kRc || t.endpoint().dct) return;
  t.endpoint().remote_error.store(1, std::memory_order_release);
  if (auto* ring = static_cast<CqRing*>(t.Resolve(t.endpoint().recv_cq)))
    ring->attention.store(1, std::memory_order_release);
  if (t.endpoint().async_fd >= 0) t.Signal(t.endpoint().async_fd, t.endpoint().async_tag);
}

// A copy that failed because the target process died or its QP was destroyed meanwhile is a
// target that does not answer (ESRCH); one cut
// short because its key was withdrawn meanwhile is a remote access error, as a NIC gives for a
// key invalidated mid-transfer; any other failure is the target's (remote operational error).
ReplyCode CopyFailed(const Status& s) {
  if (s.code() == ESRCH) return ReplyCode::kNoAnswer;
  return s.code() == ECANCELED ? ReplyCode::kRemoteAccess : ReplyCode::kRemoteOp;
}

// Completes a receive WQE on the target's receive CQ and wakes its channel if armed.
template <typename Fill>
void CompleteAtTarget(const TargetQp& t, const Completion& c, Fill&& fill) {
  auto* ring = static_cast<CqRing*>(t.Resolve(t.endpoint().recv_cq));
  if (ring == nullptr) return;
  PushOutcome out = CqRingPush(*ring, c, [&t](fabric::SharedRef ref) { return t.Resolve(ref); }, fill);
  if (out.notify_fd >= 0) t.Signal(out.notify_fd, out.notify_tag);
  // A full CQ lost the completion: the owner learns it as IBV_EVENT_CQ_ERR even if it is blocked
  // in ibv_get_async_event (the ring's overrun flag says which CQ).
  if (!out.stored && t.endpoint().async_fd >= 0) t.Signal(t.endpoint().async_fd, t.endpoint().async_tag);
}

void CompleteAtTarget(const TargetQp& t, const Completion& c) {
  CompleteAtTarget(t, c, [](CqEntry&) {});
}

// A receive that fails at the target completes there in error and moves the target to ERR.
void FailReceive(const TargetQp& t, Completion c, uint32_t status) {
  c.status = status;
  c.byte_len = 0;
  CompleteAtTarget(t, c);
  FailTarget(t);
}

// Copies the gather list into a landing (transport/cq_ring.h); the owner's poll scatters it.
void FillLanding(CqEntry& e, const iovec* gather, size_t ng, const ScatterList& scatter) {
  uint8_t* to = e.landing;
  for (size_t i = 0; i < ng; ++i) {
    memcpy(to, gather[i].iov_base, gather[i].iov_len);
    to += gather[i].iov_len;
  }
  e.landing_length = static_cast<uint8_t>(to - e.landing);  // at most kLandingBytes
  const iovec* piece = scatter.pieces.data();
  const uint32_t pieces = static_cast<uint32_t>(scatter.pieces.size());  // at most kLandingPieces
  e.flags |= static_cast<uint8_t>(pieces << kCqEntryPieceShift);
  for (uint32_t i = 0; i < pieces; ++i)
    CqEntrySetPiece(e, i, {reinterpret_cast<uint64_t>(piece[i].iov_base), static_cast<uint32_t>(piece[i].iov_len),
                           scatter.lkey[i]});
}

Completion ReceiveCompletion(const QpEndpoint& e, const TakenWqe& w, const Request& r, uint64_t need, bool grh) {
  Completion c;
  c.wr_id = w.wr_id;
  c.qp_num = e.qp_num;
  c.src_qp = r.src_qp;
  c.opcode = r.opcode == WrOpcode::kRdmaWriteWithImm ? wc_opcode::kRecvRdmaWithImm : wc_opcode::kRecv;
  c.imm_data = r.imm_data;
  c.wc_flags = (r.with_imm() ? wc_flag::kWithImm : 0) | (grh ? wc_flag::kGrh : 0);
  c.solicited = r.solicited;
  c.byte_len = static_cast<uint32_t>(need);
  return c;
}

// How a SEND arriving through a TM SRQ completes (ibv_post_srq_ops(3); mlx5 cq.c): matched
// (handled apart), unexpected (a tagged message no posted tag took: an ordinary SRQ WQE gets the
// whole message, TMH included, as IBV_WC_TM_RECV without IBV_WC_TM_MATCH, and the unexpected
// count rises), or NO_TAG (IBV_WC_TM_NO_TAG, the whole message).
struct ResponderTmMode {
  bool active = false;
  bool unexpected = false;
  uint32_t opcode = 0;
  TagTable* table = nullptr;
};

// The message's first `want` bytes (a TMH, an RVH: the requester's memory, readable here);
// false if it is shorter.
bool ResponderPeek(const Request& r, uint8_t* out, uint32_t want) {
  if (r.length < want) return false;
  uint32_t got = 0;
  for (size_t i = 0; i < r.local_count && got < want; ++i) {
    const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(r.local[i].iov_len, want - got));
    memcpy(out + got, r.local[i].iov_base, n);
    got += n;
  }
  return got == want;
}

// The gather list without its first `skip` bytes.
std::vector<iovec> ResponderSkipBytes(const iovec* local, size_t count, uint64_t skip) {
  std::vector<iovec> out;
  for (size_t i = 0; i < count; ++i) {
    if (skip >= local[i].iov_len) {
      skip -= local[i].iov_len;
      continue;
    }
    out.push_back({static_cast<uint8_t*>(local[i].iov_base) + skip, local[i].iov_len - skip});
    skip = 0;
  }
  return out;
}

// An atomic's operands (AtomicETH), the `arg` of CompareSwap and FetchAdd.
struct AtomicOperands {
  uint64_t compare_add;
  uint64_t swap;
};

uint64_t CompareSwap(uint64_t value, const void* arg) {
  const auto* o = static_cast<const AtomicOperands*>(arg);
  return value == o->compare_add ? o->swap : value;
}

uint64_t FetchAdd(uint64_t value, const void* arg) { return value + static_cast<const AtomicOperands*>(arg)->compare_add; }

uint64_t AtomicWriteValue(uint64_t, const void* arg) { return *static_cast<const uint64_t*>(arg); }

}  // namespace

Reply Responder::Execute(const TargetQp& t, const Request& r, const uint8_t* grh) {
  const QpEndpoint& e = t.endpoint();
  if (!Admits(t.endpoint(), r)) return Silence(r);
  switch (r.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
    case WrOpcode::kSendWithInv:
      // IBA 10.2.5 / 9.6.1.1: a datagram whose Q_Key is not the QP's is dropped.
      if (r.qp_type == kUd && r.qkey != e.qkey) return Reply::Of(ReplyCode::kDropped);
      return Deliver(t, r, grh);
    case WrOpcode::kRdmaWrite:
      return Rdma(t, r, true);
    case WrOpcode::kRdmaWriteWithImm: {
      Reply reply = Rdma(t, r, true);
      return reply.code == ReplyCode::kAck ? Deliver(t, r, nullptr) : reply;
    }
    case WrOpcode::kRdmaRead:
      return Rdma(t, r, false);
    case WrOpcode::kAtomicCmpSwp:
    case WrOpcode::kAtomicFetchAdd:
      return Atomic(t, r);
    case WrOpcode::kAtomicWrite:
      return AtomicWrite(t, r);
    default:
      FailTarget(t);  // an opcode no responder executes: invalid request (IBA 9.7.5.2.2)
      return Reply::Of(ReplyCode::kInvalidRequest);
  }
}

uint32_t Responder::DirectGrants(const QpEndpoint& e, uint32_t process_slot, const KeyView& k) {
  // (Rdma's and Atomic's key rules, found once: ExecuteDirect then checks the access's bit)
  if (k.indirect() || k.null_key() || k.on_demand()) return 0;
  uint32_t grants = 0;
  for (const uint32_t access : {kRemoteWrite, kRemoteRead, kRemoteAtomic})
    if (KeyAdmits(k, KeyRule{process_slot, e.pd, access, access != kRemoteRead, /*remote=*/true, e.qp_num}))
      grants |= access;
  return grants;
}

namespace {
// memmove, with the messages of 8 to 16 bytes a latency test sends copied in place (two
// overlapping words, both loaded before either is stored: memmove's semantics, without its call).
inline void CopySmallOrMove(void* to, const void* from, uint64_t n) {
  if (n >= 8 && n <= 16) {
    uint64_t head, tail;
    memcpy(&head, from, 8);
    memcpy(&tail, static_cast<const uint8_t*>(from) + n - 8, 8);
    memcpy(to, &head, 8);
    memcpy(static_cast<uint8_t*>(to) + n - 8, &tail, 8);
    return;
  }
  memmove(to, from, n);
}
}  // namespace

bool Responder::ExecuteDirect(const DirectTarget& t, uint32_t admitted, const DirectRequest& r, Reply* reply) {
  // Execute's rules for its success case, in the order Rdma and Atomic apply them; a request
  // any of them refuses is Execute's to answer. (An RC request: not a DCI's, not XRC.)
  uint32_t access = 0;
  uint64_t length = r.length;
  switch (r.opcode) {
    case WrOpcode::kRdmaWrite:
      access = kRemoteWrite;
      break;
    case WrOpcode::kRdmaRead:
      access = kRemoteRead;
      break;
    case WrOpcode::kAtomicCmpSwp:
    case WrOpcode::kAtomicFetchAdd:
      access = kRemoteAtomic;
      length = 8;  // IBA 9.4.5: the naturally aligned word, whatever the local side's length
      if (r.remote_addr % 8 != 0) return false;
      break;
    default:
      return false;
  }
  if (r.length == 0 || length > kDirectMaxBytes || !(admitted & access)) return false;
  const KeyView& k = *t.key;
  if (k.key != r.rkey || !KeyCovers(k, r.remote_addr, length)) return false;
  const uint64_t offset = r.remote_addr - k.iova;
  uint8_t* at = t.base + offset;
  // (a copy or atomic the owner's memory was not there for: a remote operational error, as
  // Execute answers it -- IBA 9.7.5.2.4)
  if (access == kRemoteAtomic) {
    const uint64_t va = k.addr + offset;
    if (va % 8 != 0) return false;  // the owner's word must be aligned too (Atomic's rule)
    const AtomicOperands operands{r.compare_add, r.swap};
    uint64_t before = 0;
    const bool done = t.atomic(t.ctx, va, reinterpret_cast<uint64_t*>(at),
                               r.opcode == WrOpcode::kAtomicCmpSwp ? CompareSwap : FetchAdd, &operands, &before);
    reply->code = done ? ReplyCode::kAck : ReplyCode::kRemoteOp;
    reply->original = before;
    return true;
  }
  if (t.move == nullptr) {
    if (access == kRemoteWrite)
      CopySmallOrMove(at, r.local, length);
    else
      CopySmallOrMove(r.local, at, length);
    reply->code = ReplyCode::kAck;
    return true;
  }
  const bool done = t.move(t.ctx, access == kRemoteWrite, at, r.local, length);
  reply->code = done ? ReplyCode::kAck : ReplyCode::kRemoteOp;
  return true;
}

namespace {

// BeginReceive's tag matching (see Deliver): the first packet's TMH, matched against the TM
// SRQ's tags. True when a tag took the message (`wqe` is then its buffer).
bool ResponderMatchFirstPacket(const TargetQp& t, const RecvRing& rq, const Request& r, TakenWqe* wqe,
                               ReceiveTm* tm) {
  *tm = ReceiveTm{};
  uint8_t bytes[kTmhBytes];
  if (!rq.tm.valid() || r.qp_type != kRc || r.opcode == WrOpcode::kRdmaWriteWithImm ||
      !ResponderPeek(r, bytes, kTmhBytes))
    return false;
  auto* table = static_cast<TagTable*>(t.Resolve(rq.tm));
  if (table == nullptr) return false;
  const TmHeader h = ParseTmh(bytes);
  if (h.opcode != kTmhEager && h.opcode != kTmhRndv) {
    tm->mode = ReceiveTm::kNoTag;
    return false;
  }
  const TagMatch m = TagMatchTake(*table, h.tag);
  if (!m.found) {
    tm->mode = ReceiveTm::kUnexpected;
    return false;
  }
  *wqe = TakenWqe{};
  wqe->found = true;
  wqe->wr_id = m.entry.wr_id;  // the ADD's recv_wr_id
  wqe->num_sge = m.entry.num_sge;
  wqe->sge[0] = {m.entry.addr, m.entry.length, m.entry.lkey};
  tm->tag = h.tag;
  tm->app_ctx = h.app_ctx;
  tm->mode = h.opcode == kTmhRndv ? Responder::RendezvousMode(t, r, tm) : ReceiveTm::kMatched;
  return true;
}

// The completion of a receive that came through a TM SRQ (Deliver's and DeliverMatched's rules).
void ResponderTmCompletion(const ReceiveTm& tm, Completion* c) {
  switch (tm.mode) {
    case ReceiveTm::kMatched:
    case ReceiveTm::kRndvSoftware:
      c->opcode = wc_opcode::kTmRecv;
      c->wc_flags |= wc_flag::kTmMatch | wc_flag::kTmDataValid;
      if (tm.mode == ReceiveTm::kRndvSoftware) c->status = wc_status::kTmRndvIncomplete;
      break;
    case ReceiveTm::kUnexpected:
      c->opcode = wc_opcode::kTmRecv;
      if (tm.sync_req) c->wc_flags |= wc_flag::kTmSyncReq;
      break;
    case ReceiveTm::kNoTag:
      c->opcode = wc_opcode::kTmNoTag;
      break;
    default:
      break;
  }
}

}  // namespace

Reply Responder::BeginReceive(const TargetQp& t, const Request& r, TakenWqe* wqe, ReceiveTm* tm) {
  if (!Admits(t.endpoint(), r)) return Silence(r);
  QpEndpoint& e = t.endpoint();
  auto* rq = static_cast<RecvRing*>(t.Resolve(e.recv_queue));
  if (rq == nullptr) return Silence(r);
  if (tm != nullptr && ResponderMatchFirstPacket(t, *rq, r, wqe, tm)) return Reply::Of(ReplyCode::kAck);
  *wqe = RecvRingTake(*rq, [&t](fabric::SharedRef ref) { return t.Resolve(ref); });
  if (wqe->limit_crossed && rq->async_fd >= 0) t.Signal(rq->async_fd, rq->async_tag);
  if (!wqe->found)  // IBA 9.7.5.2.8 (RC: RNR NAK) / 9.8.3 (UC: dropped)
    return r.qp_type == kRc ? Reply::Rnr(static_cast<uint8_t>(e.min_rnr_timer & 31)) : Reply::Of(ReplyCode::kDropped);
  if (tm != nullptr && tm->mode == ReceiveTm::kUnexpected) {
    auto* table = static_cast<TagTable*>(t.Resolve(rq->tm));
    tm->sync_req = table != nullptr && TagNoteUnexpected(*table);
  }
  return Reply::Of(ReplyCode::kAck);
}

Reply Responder::PlaceReceive(const TargetQp& t, const TakenWqe& wqe, uint64_t offset, const Request& r,
                              const ReceiveTm* tm) {
  if (tm != nullptr && tm->mode == ReceiveTm::kRndvRead) return Reply::Of(ReplyCode::kAck);  // the READ brings the data
  // A matched message's TMH is not the tag's data: the bytes before `skip` land nowhere.
  const uint64_t skip = tm != nullptr ? tm->skip() : 0;
  std::vector<iovec> rest;
  Request part = r;
  if (skip > 0) {
    const uint64_t drop = offset >= skip ? 0 : std::min(skip - offset, r.length);
    rest = ResponderSkipBytes(r.local, r.local_count, drop);
    part.local = rest.data();
    part.local_count = rest.size();
    part.length = r.length - drop;
    offset = offset + drop - skip;
  }
  if (part.length == 0) return Reply::Of(ReplyCode::kAck);
  ScatterList scatter;
  const ReplyCode code = Scatter(t, wqe, offset, part.length, false, &scatter);
  Status s = code != ReplyCode::kAck ? Status::Ok()
             : scatter.imported
                 ? ResponderImportedReceive(t, wqe, offset, part.local, part.local_count, part.length)
                 : t.Move(true, part.local, part.local_count, scatter.pieces);
  if (code == ReplyCode::kAck && s.ok()) return Reply::Of(ReplyCode::kAck);
  // As Execute: too small a WQE is a length error at the target and an invalid request for the
  // sender; an SGE the target may not write, a protection error there.
  Completion c = ReceiveCompletion(t.endpoint(), wqe, r, 0, false);
  if (tm != nullptr && tm->mode != ReceiveTm::kNone) c.opcode = tm->mode == ReceiveTm::kNoTag ? wc_opcode::kTmNoTag
                                                                                                : wc_opcode::kTmRecv;
  FailReceive(t, c, code == ReplyCode::kInvalidRequest ? wc_status::kLocLenErr : wc_status::kLocProtErr);
  return Reply::Of(code == ReplyCode::kAck ? CopyFailed(s) : code);
}

Reply Responder::CompleteReceive(const TargetQp& t, const TakenWqe& wqe, const Request& r, uint64_t total,
                                 const ReceiveTm* tm, RendezvousRead* rndv) {
  if (tm != nullptr && tm->mode == ReceiveTm::kRndvRead) return ReceiveRendezvous(t, wqe, r, *tm, rndv);
  const uint64_t skip = tm != nullptr ? tm->skip() : 0;
  Completion c = ReceiveCompletion(t.endpoint(), wqe, r, total >= skip ? total - skip : 0, false);
  if (r.opcode == WrOpcode::kSendWithInv) {
    // IBA 10.6.7.2.2, as in Deliver.
    if (!RemoteInvalidate(t.registry(), r.invalidate_rkey, t.process_slot(), t.endpoint().qp_num)) {
      FailReceive(t, c, wc_status::kLocProtErr);
      return Reply::Of(ReplyCode::kInvalidRequest);
    }
    c.wc_flags |= wc_flag::kWithInv;
    c.imm_data = r.invalidate_rkey;
  }
  if (tm == nullptr || tm->mode == ReceiveTm::kNone) {
    CompleteAtTarget(t, c);
    return Reply::Of(ReplyCode::kAck);
  }
  ResponderTmCompletion(*tm, &c);
  const bool matched = tm->mode == ReceiveTm::kMatched || tm->mode == ReceiveTm::kRndvSoftware;
  const TmInfo info = matched ? TmInfo{tm->tag, tm->app_ctx} : TmInfo{};
  CompleteAtTarget(t, c, [&info](CqEntry& entry) { entry.tm = info; });
  return Reply::Of(ReplyCode::kAck);
}

Reply Responder::CheckRange(const TargetQp& t, uint32_t rkey, uint64_t addr, uint64_t length, bool write) {
  if (!write && t.endpoint().max_dest_rd_atomic == 0) {
    FailTarget(t);
    return Reply::Of(ReplyCode::kInvalidRequest);
  }
  if (length == 0) return Reply::Of(ReplyCode::kAck);  // IBA 9.4.3.1 / 9.4.4: no R_Key checked
  PinnedPieces pieces;
  if (ReplyCode code = CheckRemote(t, rkey, addr, length, write ? kRemoteWrite : kRemoteRead, &pieces);
      code != ReplyCode::kAck) {
    FailTarget(t);
    return Reply::Of(code);
  }
  return Reply::Of(ReplyCode::kAck);
}

void Responder::EnterError(const TargetQp& t) { FailTarget(t); }

void Responder::CompleteAt(const TargetQp& t, const Completion& c, const TmInfo* info) {
  if (info == nullptr) return CompleteAtTarget(t, c);
  CompleteAtTarget(t, c, [info](CqEntry& entry) { entry.tm = *info; });
}

void Responder::FailAt(const TargetQp& t, const Completion& c, uint32_t status) { FailReceive(t, c, status); }

ReplyCode Responder::CheckRemote(const TargetQp& t, uint32_t rkey, uint64_t addr, uint64_t length, uint32_t access,
                                 PinnedPieces* pieces) {
  const QpEndpoint& e = t.endpoint();
  // IBA 10.6.3 / 9.7.5.1.3: the QP must allow the operation, and the R_Key must be valid, be the
  // target's, belong to the QP's PD, allow the access and cover the whole range.
  if (!(e.access & access)) return ReplyCode::kRemoteAccess;
  const KeyRule rule{t.process_slot(), e.pd, access, access != kRemoteRead, /*remote=*/true, e.qp_num};
  if (!ResolveKey(t.registry(), rkey, addr, length, length, rule, [&t](fabric::SharedRef ref) { return t.Resolve(ref); },
                  pieces))
    return ReplyCode::kRemoteAccess;
  return ReplyCode::kAck;
}

namespace {

// IBA 10.6.3.1 / 9.9.3.1.2: a receive buffer the target may not write (no such key, another
// PD's or process's, no LOCAL_WRITE, out of its bounds) is a local protection error at the
// target; one too small, a local length error there and an invalid request for the sender.
// Either way the target QP enters ERR.
Reply ResponderRefuseReceive(const TargetQp& t, const Completion& c, const TakenWqe& w, ReplyCode code) {
  const bool short_wqe = code == ReplyCode::kInvalidRequest;
  SV_LOG(kError, "SEND of %u bytes to qp 0x%x: receive WR 0x%llx (lkey 0x%x) %s: IBV_WC_LOC_%s_ERR at the target",
         c.byte_len, t.endpoint().qp_num, static_cast<unsigned long long>(w.wr_id), w.num_sge > 0 ? w.sge[0].lkey : 0,
         short_wqe ? "is too small for it" : "names a buffer the QP may not write through its key",
         short_wqe ? "LEN" : "PROT");
  FailReceive(t, c, short_wqe ? wc_status::kLocLenErr : wc_status::kLocProtErr);
  return Reply::Of(code);
}

enum class LandOne { kLanded, kRefused, kUsualWay };

// Deliver's common landed SEND -- one receive buffer that holds the message, one piece of the
// sender's, no GRH, no tag matching -- checked as Scatter checks a landing's buffer (its key
// as the key table holds it now: the owner's poll checks it again before writing) and landed
// without the scatter and gather lists. kUsualWay: a key this path does not land through (an
// indirect, null or imported one), for Deliver's usual way to decide.
LandOne ResponderLandOne(const TargetQp& t, const Request& r, const TakenWqe& w, const Completion& c) {
  const RecvSge& s = w.sge[0];
  const uint64_t need = r.length;
  KeyView read;
  ReceiveKeys* kept = t.receive_keys();
  const KeyView* view = kept != nullptr ? kept->Peek(t.registry(), s.lkey)
                        : KeyPin::Peek(t.registry(), s.lkey, &read) ? &read : nullptr;
  if (view == nullptr) return LandOne::kRefused;
  const KeyView& k = *view;
  if (k.indirect() || k.null_key()) return LandOne::kUsualWay;
  const QpEndpoint& e = t.endpoint();
  if (!KeyAdmits(k, KeyRule{t.process_slot(), e.pd, kLocalWrite, true}) || !KeyCovers(k, s.addr, s.length)) {
    // Scatter's rule: of the QP's PD but another process's (imported), the usual way decides.
    if (k.owner_process_slot() == t.process_slot() || k.pd != e.pd || k.window()) return LandOne::kRefused;
    return LandOne::kUsualWay;
  }
  const uint64_t host = k.addr + (s.addr - k.iova);
  if (!OnDemandPresent(t.registry(), k, host, need, true)) return LandOne::kRefused;
  const void* bytes = r.local[0].iov_base;
  CompleteAtTarget(t, c, [&](CqEntry& entry) {
    memcpy(entry.landing, bytes, need);
    entry.landing_length = static_cast<uint8_t>(need);  // at most kLandingBytes
    entry.flags |= static_cast<uint8_t>(1u << kCqEntryPieceShift);
    CqEntrySetPiece(entry, 0, {host, static_cast<uint32_t>(need), s.lkey});
  });
  return LandOne::kLanded;
}

}  // namespace

Reply Responder::Deliver(const TargetQp& t, const Request& r, const uint8_t* grh) {
  QpEndpoint& e = t.endpoint();
  auto* rq = static_cast<RecvRing*>(t.Resolve(e.recv_queue));
  if (rq == nullptr) return Silence(r);
  ResponderTmMode tm;
  uint8_t tmh_bytes[kTmhBytes];
  // Tag matching is offered to RC (tm_caps.flags IBV_TM_CAP_RC); a message shorter than a TMH
  // has none and is an ordinary receive.
  if (rq->tm.valid() && r.qp_type == kRc && r.opcode != WrOpcode::kRdmaWriteWithImm && ResponderPeek(r, tmh_bytes, kTmhBytes)) {
    tm.table = static_cast<TagTable*>(t.Resolve(rq->tm));
    const TmHeader h = ParseTmh(tmh_bytes);
    tm.active = tm.table != nullptr;
    if (tm.active && (h.opcode == kTmhEager || h.opcode == kTmhRndv)) {
      TagMatch m = TagMatchTake(*tm.table, h.tag);
      if (m.found) return DeliverMatched(t, r, m, h);
      tm.unexpected = true;
    }
    tm.opcode = tm.unexpected ? wc_opcode::kTmRecv : wc_opcode::kTmNoTag;
  }
  TakenWqe w = RecvRingTake(*rq, [&t](fabric::SharedRef ref) { return t.Resolve(ref); });
  if (w.limit_crossed && rq->async_fd >= 0) t.Signal(rq->async_fd, rq->async_tag);  // IBV_EVENT_SRQ_LIMIT_REACHED
  // No WQE: RC answers RNR NAK (IBA 9.7.5.2.8); UC and UD drop the message (IBA 9.8.3, 9.6.3).
  // A target whose process died answers nothing at all (its endpoint still reads as it was).
  if (!w.found) {
    if (!t.IsAlive()) return Silence(r);
    return r.qp_type == kRc ? Reply::Rnr(static_cast<uint8_t>(e.min_rnr_timer & 31)) : Reply::Of(ReplyCode::kDropped);
  }
  const uint64_t need = r.length + (grh ? 40 : 0);
  Completion c = ReceiveCompletion(e, w, r, need, grh != nullptr);
  if (grh) c.sl = RoceL3Type(grh);
  if (tm.active) {
    c.opcode = tm.opcode;
    if (tm.unexpected && TagNoteUnexpected(*tm.table)) c.wc_flags |= wc_flag::kTmSyncReq;
  }
  if (r.opcode == WrOpcode::kRdmaWriteWithImm) {  // consumes the WQE without touching its buffers
    CompleteAtTarget(t, c);
    return Reply::Of(ReplyCode::kAck);
  }
  // A small message lands in the completion itself when the owner's memory is dear to reach:
  // its buffers are written later by the owner's poll, which checks them again, so here they
  // are only checked. Anything else is copied now, its buffers pinned.
  bool landing = t.LandsInCompletion() && need <= kLandingBytes;
  if (landing && grh == nullptr && !tm.active && r.opcode != WrOpcode::kSendWithInv && need > 0 && w.num_sge == 1 &&
      w.sge[0].length >= need && r.local_count == 1 && r.local[0].iov_len == need) {
    const LandOne done = ResponderLandOne(t, r, w, c);
    if (done == LandOne::kLanded) return Reply::Of(ReplyCode::kAck);
    if (done == LandOne::kRefused) return ResponderRefuseReceive(t, c, w, ReplyCode::kRemoteOp);
  }
  ScatterList scatter;
  ReplyCode code = Scatter(t, w, 0, need, landing, &scatter);
  if (code == ReplyCode::kAck && landing && (scatter.indirect || scatter.pieces.size() > kLandingPieces)) {
    landing = false;  // too many pieces to land, or an indirect key: copy after all
    code = Scatter(t, w, 0, need, false, &scatter);
  }
  if (code != ReplyCode::kAck) return ResponderRefuseReceive(t, c, w, code);
  if (r.opcode == WrOpcode::kSendWithInv) {
    // IBA 10.6.7.2.2: SEND with Invalidate invalidates a type 2 window of the target bound to the
    // target QP before its receive completes. Any other R_Key makes it an invalid request for
    // the sender; the target's receive completes in error.
    if (!RemoteInvalidate(t.registry(), r.invalidate_rkey, t.process_slot(), e.qp_num)) {
      SV_LOG(kError, "SEND_WITH_INV to qp 0x%x: R_Key 0x%x is not a type 2 window bound to that QP: "
             "IBV_WC_LOC_PROT_ERR at the target, IBV_WC_REM_INV_REQ_ERR at the sender", e.qp_num, r.invalidate_rkey);
      FailReceive(t, c, wc_status::kLocProtErr);
      return Reply::Of(ReplyCode::kInvalidRequest);
    }
    c.wc_flags |= wc_flag::kWithInv;
    c.imm_data = r.invalidate_rkey;  // ibv_wc.invalidated_rkey shares imm_data's place
  }
  // The message's bytes: the GRH, then the sender's pieces (more than kMaxSge through an
  // indirect key).
  InlinedVector<iovec, kMaxSge + 1> gather;  // (a heap vector per message cost ~150 instructions)
  if (grh) gather.push_back({const_cast<uint8_t*>(grh), 40});
  for (size_t i = 0; i < r.local_count; ++i) gather.push_back(r.local[i]);
  if (landing) {
    // (A full receive CQ loses the completion either way: an overrun, IBA 11.4.2.1.)
    CompleteAtTarget(t, c, [&](CqEntry& entry) { FillLanding(entry, gather.data(), gather.size(), scatter); });
    return Reply::Of(ReplyCode::kAck);
  }
  if (scatter.signature) {
    // A signature mkey in the scatter list: the message is converted as it lands.
    if (!ResponderSigReceive(t, w, gather.data(), gather.size(), need)) {
      FailReceive(t, c, wc_status::kLocProtErr);
      return Reply::Of(ReplyCode::kRemoteOp);
    }
  } else if (Status s = need == 0 ? Status::Ok()
                        : scatter.imported ? ResponderImportedReceive(t, w, 0, gather.data(), gather.size(), need)
                                           : t.Move(true, gather.data(), gather.size(), scatter.pieces);
             !s.ok()) {
    if (s.code() == ESRCH) return Silence(r);
    FailReceive(t, c, wc_status::kLocProtErr);
    return Reply::Of(ReplyCode::kRemoteOp);
  }
  CompleteAtTarget(t, c);
  return Reply::Of(ReplyCode::kAck);
}

Reply Responder::DeliverMatched(const TargetQp& t, const Request& r, const TagMatch& m, const TmHeader& h) {
  TakenWqe w;
  w.found = true;
  w.wr_id = m.entry.wr_id;  // the ADD's recv_wr_id
  w.num_sge = m.entry.num_sge;
  w.sge[0] = {m.entry.addr, m.entry.length, m.entry.lkey};
  const uint64_t need = r.length - kTmhBytes;
  Completion c = ReceiveCompletion(t.endpoint(), w, r, need, false);
  c.opcode = wc_opcode::kTmRecv;
  c.wc_flags |= wc_flag::kTmMatch | wc_flag::kTmDataValid;
  // RNDV: the receiver READs the sender's buffer that the RVH names. Where the fabric cannot
  // reach the sender, that READ is left to the application, as mlx5 does when its hardware
  // cannot (CONSUMED_MSG_SW_RNDV: IBV_WC_TM_RNDV_INCOMPLETE, the RVH and what follows in the
  // tag's buffer).
  if (h.opcode == kTmhRndv) {
    Reply done = Reply::Of(ReplyCode::kAck);
    if (Rendezvous(t, r, w, h, &done)) return done;
    c.status = wc_status::kTmRndvIncomplete;
  }
  ScatterList scatter;
  ReplyCode code = need > 0 ? Scatter(t, w, 0, need, false, &scatter) : ReplyCode::kAck;
  if (scatter.signature) code = ReplyCode::kRemoteOp;  // a tag's buffer is an MR (ibv_post_srq_ops(3))
  if (code != ReplyCode::kAck) {
    SV_LOG(kError, "SEND to qp 0x%x: the %llu bytes after the TMH do not fit the buffer of tag 0x%llx "
           "(handle %u): IBV_WC_%s at the target", t.endpoint().qp_num, static_cast<unsigned long long>(need),
           static_cast<unsigned long long>(h.tag), m.handle,
           code == ReplyCode::kInvalidRequest ? "LOC_LEN_ERR" : "LOC_PROT_ERR");
    c.wc_flags = 0;
    FailReceive(t, c, code == ReplyCode::kInvalidRequest ? wc_status::kLocLenErr : wc_status::kLocProtErr);
    return Reply::Of(code);
  }
  std::vector<iovec> gather = ResponderSkipBytes(r.local, r.local_count, kTmhBytes);
  if (Status s = need == 0 ? Status::Ok()
                 : scatter.imported ? ResponderImportedReceive(t, w, 0, gather.data(), gather.size(), need)
                                    : t.Move(true, gather.data(), gather.size(), scatter.pieces);
      !s.ok()) {
    if (s.code() == ESRCH) return Silence(r);
    c.wc_flags = 0;
    FailReceive(t, c, wc_status::kLocProtErr);
    return Reply::Of(ReplyCode::kRemoteOp);
  }
  CompleteAtTarget(t, c, [&h](CqEntry& entry) { entry.tm = TmInfo{h.tag, h.app_ctx}; });
  return Reply::Of(ReplyCode::kAck);
}

bool Responder::Rendezvous(const TargetQp& t, const Request& r, const TakenWqe& w, const TmHeader& h,
                           Reply* done) {
  uint8_t head[kTmhBytes + kRvhBytes];
  if (!ResponderPeek(r, head, sizeof(head))) return false;  // no RVH: left to the application
  std::unique_ptr<TargetQp> sender = t.Requester(r.src_qp);
  if (sender == nullptr) return false;
  const uint64_t va = Be64(head + 16);
  const uint32_t rkey = Be32(head + 24), len = Be32(head + 28);
  const auto info = [&h](CqEntry& entry) { entry.tm = TmInfo{h.tag, h.app_ctx}; };
  // mlx5 (cq.c): a first completion when the tag is consumed (IBV_WC_TM_MATCH)...
  Completion c = ReceiveCompletion(t.endpoint(), w, r, 0, false);
  c.opcode = wc_opcode::kTmRecv;
  c.wc_flags = wc_flag::kTmMatch;
  CompleteAtTarget(t, c, info);
  // ...the READ (IBA 9.4.4 rules at the sender: its QP's REMOTE_READ, the key in its PD)...
  c.wc_flags = wc_flag::kTmDataValid;
  c.byte_len = len;
  ScatterList dst;
  PinnedPieces src;
  ReplyCode code = len > 0 ? Scatter(t, w, 0, len, false, &dst) : ReplyCode::kAck;
  // A tag's buffer is this process's memory: a signature or imported key there is refused.
  if (dst.signature || dst.imported) code = ReplyCode::kRemoteOp;
  uint32_t status = code == ReplyCode::kAck ? wc_status::kSuccess
                    : code == ReplyCode::kInvalidRequest ? wc_status::kLocLenErr : wc_status::kLocProtErr;
  if (status == wc_status::kSuccess && len > 0 &&
      CheckRemote(*sender, rkey, va, len, kRemoteRead, &src) != ReplyCode::kAck) {
    status = wc_status::kRemAccessErr;
    FailTarget(*sender);  // its responder refuses the READ as on the wire: NAK, its QP to ERR (rxe)
  }
  if (status == wc_status::kSuccess && len > 0) {
    std::vector<uint8_t> bounce(len);  // the sender's memory, then the receiver's
    iovec b{bounce.data(), len};
    if (!sender->Move(false, &b, 1, src).ok() || !t.Move(true, &b, 1, dst.pieces).ok()) status = wc_status::kRemOpErr;
  }
  if (status != wc_status::kSuccess) {
    SV_LOG(kError, "tag matching rendezvous at qp 0x%x (tag 0x%llx): READ of [0x%llx, +%u) rkey 0x%x from qp 0x%x "
           "failed (wc status %u)", t.endpoint().qp_num, static_cast<unsigned long long>(h.tag),
           static_cast<unsigned long long>(va), len, rkey, r.src_qp, status);
    c.wc_flags = 0;
    FailReceive(t, c, status);
    return true;
  }
  // ...the second completion (IBV_WC_TM_DATA_VALID; mlx5's carries no TMH: tag info 0), and a
  // FIN to the sender, a SEND carrying a TMH (ibv_tmh FIN, its tag and app_ctx), which the
  // sender's requester carries after its SEND's completion (Reply::fin).
  CompleteAtTarget(t, c);
  done->fin = true;
  done->fin_from_qp = t.endpoint().qp_num;
  done->fin_app_ctx = h.app_ctx;
  done->fin_tag = h.tag;
  return true;
}

ReplyCode Responder::Scatter(const TargetQp& t, const TakenWqe& w, uint64_t skip, uint64_t need, bool peek_only,
                             ScatterList* out) {
  // The WQE's scatter list from byte `skip` on, checked like any local access of the target:
  // its keys, its PD, LOCAL_WRITE, in bounds (IBA 10.6.3.1).
  const QpEndpoint& e = t.endpoint();
  out->pieces.Clear();
  out->indirect = false;
  out->signature = false;
  out->imported = false;
  const KeyRule rule{t.process_slot(), e.pd, kLocalWrite, true};
  uint64_t room = 0;
  for (uint32_t i = 0; i < w.num_sge && room < need; ++i) {
    const RecvSge& s = w.sge[i];
    if (skip >= s.length) {  // (zero-length SGEs too)
      skip -= s.length;
      continue;
    }
    const uint64_t start = skip;
    skip = 0;
    const uint64_t take = std::min<uint64_t>(s.length - start, need - room);
    room += take;
    if (!peek_only) {
      if (!ResolveKey(t.registry(), s.lkey, s.addr + start, s.length - start, take, rule,
                      [&t](fabric::SharedRef ref) { return t.Resolve(ref); }, &out->pieces)) {
        // A signature mkey refuses plain accesses: ResponderSigReceive scatters the message; an
        // imported lkey is the exporter's memory: ResponderImportedReceive.
        if (ResponderIsSigKey(t, s.lkey))
          out->signature = true;
        else if (ResponderIsImportedKey(t, s.lkey))
          out->imported = true;
        else
          return ReplyCode::kRemoteOp;
      }
      continue;
    }
    KeyView k;
    ReceiveKeys* kept = t.receive_keys();  // (the same view a fresh read gives: receive_keys.h)
    if (kept != nullptr) {
      const KeyView* v = kept->Peek(t.registry(), s.lkey);
      if (v == nullptr) return ReplyCode::kRemoteOp;
      k = *v;
    } else if (!KeyPin::Peek(t.registry(), s.lkey, &k)) {
      return ReplyCode::kRemoteOp;
    }
    if (k.indirect() || k.null_key()) {
      // Checked when scattered for real (never landed): an indirect key's pieces are the
      // layout's; a null key's (ibv_alloc_null_mr) are its owner's discard chunk.
      out->indirect = true;
      continue;
    }
    if (!KeyAdmits(k, rule) || !KeyCovers(k, s.addr, s.length)) {
      // An MR of the QP's PD registered by another process (imported): never landed, its
      // memory is that process's; checked when scattered for real.
      if (k.owner_process_slot() == t.process_slot() || k.pd != e.pd || k.window()) return ReplyCode::kRemoteOp;
      out->indirect = true;
      continue;
    }
    const uint64_t host = k.addr + (s.addr + start - k.iova);
    if (!OnDemandPresent(t.registry(), k, host, take, true)) return ReplyCode::kRemoteOp;
    out->lkey[out->pieces.size()] = s.lkey;
    out->pieces.Add({reinterpret_cast<void*>(host), take});
  }
  return room < need ? ReplyCode::kInvalidRequest : ReplyCode::kAck;
}

Reply Responder::Rdma(const TargetQp& t, const Request& r, bool write) {
  const QpEndpoint& e = t.endpoint();
  // IBA 9.7.5.1.4: a responder with no resources for RDMA READ (max_dest_rd_atomic 0) refuses it.
  if (!write && e.max_dest_rd_atomic == 0) {
    FailTarget(t);
    return Reply::Of(ReplyCode::kInvalidRequest);
  }
  if (r.length == 0) return Reply::Of(ReplyCode::kAck);  // IBA 9.4.3.1 / 9.4.4: a zero-length transfer checks no R_Key
  PinnedPieces remote;
  if (ReplyCode code = CheckRemote(t, r.rkey, r.remote_addr, r.length, write ? kRemoteWrite : kRemoteRead, &remote);
      code != ReplyCode::kAck) {
    // A signature mkey refuses plain accesses: its bytes are converted between its wire view
    // and its memory (responder_signature.h).
    if (code == ReplyCode::kRemoteAccess &&
        ResponderSigRdma(t, r, write, write ? kRemoteWrite : kRemoteRead) == SigAccessResult::kDone)
      return Reply::Of(ReplyCode::kAck);
    FailTarget(t);
    return Reply::Of(code);
  }
  Status s = t.Move(write, r.local, r.local_count, remote);
  return Reply::Of(s.ok() ? ReplyCode::kAck : CopyFailed(s));
}

Reply Responder::Atomic(const TargetQp& t, const Request& r) {
  const QpEndpoint& e = t.endpoint();
  // No responder resources for atomics either (IBA 9.7.5.1.4); IBA 9.4.5: atomics operate on
  // naturally aligned 8 bytes.
  if (e.max_dest_rd_atomic == 0 || r.remote_addr % 8 != 0) {
    FailTarget(t);
    return Reply::Of(ReplyCode::kInvalidRequest);
  }
  PinnedPieces pieces;
  if (ReplyCode code = CheckRemote(t, r.rkey, r.remote_addr, 8, kRemoteAtomic, &pieces); code != ReplyCode::kAck) {
    FailTarget(t);
    return Reply::Of(code);
  }
  // Through an indirect key the 8 bytes must be one naturally aligned word of one underlying MR:
  // the responder cannot apply an atomic to bytes of two places at once. Like a misaligned
  // address it is an invalid request (IBA 9.7.5.2.2).
  if (pieces.size() != 1 || reinterpret_cast<uint64_t>(pieces.data()[0].iov_base) % 8 != 0) {
    FailTarget(t);
    return Reply::Of(ReplyCode::kInvalidRequest);
  }
  const AtomicOperands operands{r.compare_add, r.swap};
  auto original = t.AtomicUpdate(pieces, r.opcode == WrOpcode::kAtomicCmpSwp ? CompareSwap : FetchAdd, &operands);
  if (!original.ok()) return Reply::Of(CopyFailed(original.status()));
  Reply reply = Reply::Of(ReplyCode::kAck);
  reply.original = *original;
  return reply;
}

// IBA 1.5 9.4.6 ATOMIC WRITE: the requester's 8 bytes stored at once at a naturally aligned
// address. Checked as the kernel's rxe (rxe_resp.c): the QP and the R_Key must allow
// REMOTE_WRITE (not REMOTE_ATOMIC), a misaligned target is an invalid request; the store is one
// 8-byte update, ordered like the atomics (smp_store_release there).
Reply Responder::AtomicWrite(const TargetQp& t, const Request& r) {
  if (r.length != 8 || r.remote_addr % 8 != 0) {
    FailTarget(t);
    return Reply::Of(ReplyCode::kInvalidRequest);
  }
  PinnedPieces pieces;
  if (ReplyCode code = CheckRemote(t, r.rkey, r.remote_addr, 8, kRemoteWrite, &pieces); code != ReplyCode::kAck) {
    FailTarget(t);
    return Reply::Of(code);
  }
  if (pieces.size() != 1 || reinterpret_cast<uint64_t>(pieces.data()[0].iov_base) % 8 != 0) {
    FailTarget(t);
    return Reply::Of(ReplyCode::kInvalidRequest);
  }
  // The value: the requester's gathered bytes, in this (the initiator's) process.
  uint64_t value = 0;
  size_t at = 0;
  for (size_t i = 0; i < r.local_count && at < 8; ++i) {
    const size_t n = std::min<size_t>(r.local[i].iov_len, 8 - at);
    memcpy(reinterpret_cast<uint8_t*>(&value) + at, r.local[i].iov_base, n);
    at += n;
  }
  auto stored = t.AtomicUpdate(pieces, AtomicWriteValue, &value);
  return Reply::Of(stored.ok() ? ReplyCode::kAck : CopyFailed(stored.status()));
}

}  // namespace softverbs::transport
