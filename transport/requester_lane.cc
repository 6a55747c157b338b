// The requester's lane (Requester::PostOnLane): a SEND, RDMA WRITE, READ or atomic with one SGE,
// posted with nothing before it through an lkey kept since earlier work requests, runs here
// without the general machinery around a work request -- no SendWr, no pin list, no queue entry.
// A WRITE, READ or atomic whose destination is kept too goes to Link::CarryDirect (no Request,
// no verdict); a SEND is carried the general way's link. Its rules are Post's, GatherLocal's and
// Execute's for such a work request, each applied where it is owned: the local key's by the
// grants kept with it (KeyAdmits) and HeldKeyAddress (KeyCovers) -- found current by
// HoldAdmittedKey for a SEND, by the link once per route epoch for the rest --, the target's by
// the link and its responder. What this lane
// does not take is posted the general way, which decides, answers and logs; both ways number the
// messages from one PSN counter, complete through one completer and share one queue (a lane's
// SEND the target could not take yet waits there), so a program mixing them sees one send queue.

#include "transport/codes.h"
#include "transport/indirect_key.h"
#include "transport/requester.h"

namespace softverbs::transport {
namespace {

bool LaneAtomic(WrOpcode op) { return op == WrOpcode::kAtomicCmpSwp || op == WrOpcode::kAtomicFetchAdd; }
bool LaneSend(WrOpcode op) { return op == WrOpcode::kSend || op == WrOpcode::kSendWithImm; }

// PlainlyValid's and GatherLocal's rules for what the lane takes: one of its opcodes, a READ or
// atomic only with max_rd_atomic (IBA 11.2.4.2), an atomic's local buffer its 8-byte original
// (IBA 9.4.5), inline bytes within max_inline_data (a READ's or atomic's inline flag is ignored,
// as mlx5 does). A zero-length message is left to the general way.
bool LaneTakes(const LaneWr& wr, uint32_t max_rd_atomic, uint32_t max_inline) {
  if (wr.sge.length == 0) return false;
  switch (wr.opcode) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
    case WrOpcode::kRdmaWrite:
      return !(wr.flags & send_flag::kInline) || wr.sge.length <= max_inline;
    case WrOpcode::kRdmaRead:
      return max_rd_atomic != 0;
    case WrOpcode::kAtomicCmpSwp:
    case WrOpcode::kAtomicFetchAdd:
      return max_rd_atomic != 0 && wr.sge.length == 8;
    default:
      return false;
  }
}

// The PSNs a message of `length` bytes takes (IBA 9.7.1: one per packet, a READ one per response
// packet; an atomic one), as Execute numbers them.
uint32_t LanePackets(WrOpcode op, uint64_t length, uint32_t mtu) {
  return LaneAtomic(op) ? 1 : static_cast<uint32_t>((length + mtu - 1) / mtu);
}

}  // namespace

bool Requester::PostOnLane(const LaneWr& wr, uint32_t qp_state) {
  std::lock_guard lock(mu_);
  // Post's case of a work request executed at once: RTS, nothing queued, the queue not stopped.
  if (!lane_ || qp_state != qp_state::kRts || stopped_ || sig_stopped_ || !queue_.empty() ||
      !LaneTakes(wr, config_.max_rd_atomic, config_.max_inline))
    return false;
  // The local side: inline bytes where the application has them, or the SGE through one of the
  // kept lkeys, held (announced) until the bytes have moved.
  DirectRequest d{wr.opcode, config_.dest_qp_num, nullptr,       wr.sge.length,
                  wr.remote_addr, wr.rkey,       wr.compare_add, wr.swap};
  const bool by_key = !((wr.flags & send_flag::kInline) && CarriesData(wr.opcode));
  if (!by_key) {
    d.local = reinterpret_cast<void*>(wr.sge.addr);
    if (LaneSend(wr.opcode)) {
      SendOnLane(wr, d.local);
      return true;
    }
  } else {
    const bool writes = wr.opcode == WrOpcode::kRdmaRead || LaneAtomic(wr.opcode);  // (READ and atomics land here)
    const size_t i = local_keys_[0].key() == wr.sge.lkey ? 0 : 1;
    if (!(local_grants_[i] & (writes ? kWriteGrant : kReadGrant))) return false;  // KeyAdmits, as kept
    if (LaneSend(wr.opcode)) {  // (held here: the link's Carry of a Request knows no lkey)
      std::atomic<uint32_t>* hold = HoldAdmittedKey(KeyHazards(local_), local_keys_[i], wr.sge.lkey, wr.sge.addr,
                                                    wr.sge.length, &d.local);
      if (hold == nullptr) return false;
      SendOnLane(wr, d.local);
      ReleaseHeldKey(hold);
      return true;
    }
    // A WRITE, READ or atomic: the link announces the lkey with the target's entries, trusts it
    // per route epoch and lands an atomic's original value while it holds it (DirectRequest).
    d.local = HeldKeyAddress(local_keys_[i], wr.sge.lkey, wr.sge.addr, wr.sge.length);
    if (d.local == nullptr) return false;
    d.local_key = &local_keys_[i];
    d.local_epoch = &local_epochs_[i];
  }
  Reply reply;
  if (!links_.host->CarryDirect(d, &reply)) return false;
  const uint32_t psn = next_psn_, packets = LanePackets(wr.opcode, d.length, config_.path_mtu);
  next_psn_ = (next_psn_ + packets) & 0xffffff;
  if (reply.code == ReplyCode::kAck)
    completer_.FinishOnLane(wr.wr_id, wr.opcode, wr.flags, d.length);
  else
    SettleOnLane(wr, reply, psn, packets, 0);
  return true;
}

void Requester::SendOnLane(const LaneWr& wr, void* local) {
  // BuildRequest's fields of an RC SEND; the link finds (or keeps) the destination QP and its
  // responder takes a receive WQE.
  const iovec piece{local, wr.sge.length};
  Request r;
  r.qp_type = qp_type::kRc;
  r.opcode = wr.opcode;
  r.src_qp = config_.completer.qp_num;
  r.dest_qp = config_.dest_qp_num;
  r.psn = next_psn_;
  r.mtu = config_.path_mtu;
  r.ticket = next_ticket_++;
  r.local = &piece;
  r.local_count = 1;
  r.length = wr.sge.length;
  r.imm_data = wr.imm_data;
  r.solicited = (wr.flags & send_flag::kSolicited) != 0;
  r.addressing = &config_.av;
  const Reply reply = links_.host->Carry(r);
  const uint32_t packets = LanePackets(wr.opcode, r.length, config_.path_mtu);
  next_psn_ = (next_psn_ + packets) & 0xffffff;
  if (reply.code != ReplyCode::kAck) return SettleOnLane(wr, reply, r.psn, packets, r.ticket);
  completer_.FinishOnLane(wr.wr_id, wr.opcode, wr.flags, r.length);
  if (reply.fin) CarryFin(reply);  // a tag matching rendezvous the responder finished (Execute's order)
}

void Requester::SettleOnLane(const LaneWr& wr, const Reply& reply, uint32_t psn, uint32_t packets, uint64_t ticket) {
  // (rare: an RNR or a target that does not answer, retried from the queue; a NAK, failed)
  SendWr full;
  full.wr_id = wr.wr_id;
  full.opcode = wr.opcode;
  full.flags = wr.flags;
  full.imm_data = wr.imm_data;
  full.num_sge = 1;
  full.sge[0] = wr.sge;
  if ((wr.flags & send_flag::kInline) && CarriesData(wr.opcode)) {  // (copied by the queue entry)
    full.inline_data = reinterpret_cast<uint8_t*>(wr.sge.addr);
    full.inline_length = wr.sge.length;
  }
  full.remote_addr = wr.remote_addr;
  full.rkey = wr.rkey;
  full.compare_add = wr.compare_add;
  full.swap = wr.swap;
  WrProgress p;
  p.retry = completer_.Budget();
  p.has_psn = true;
  p.psn = psn;
  p.packets = packets;
  p.ticket = ticket != 0 ? ticket : next_ticket_++;
  p.length = wr.sge.length;
  const Completer::Verdict v = completer_.OnReply(full, p.retry, reply, wr.sge.length);
  if (v.kind == Completer::Verdict::kFailed) stopped_ = true;
  if (v.kind == Completer::Verdict::kRetry || v.kind == Completer::Verdict::kInFlight) WaitInQueue(full, p, v);
}

}  // namespace softverbs::transport
