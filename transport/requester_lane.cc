// The requester's one-sided lane (Requester::PostOneSided): an RDMA WRITE, READ or atomic with one
// SGE, posted with nothing before it, through an lkey and a destination both kept since earlier
// work requests, runs here without the general machinery around a work request -- no SendWr, no
// pin list, no Request, no queue entry, no verdict. Its rules are Post's, GatherLocal's and
// Execute's for such a work request, each applied where it is owned: the local key's by
// HoldHeldKey (KeyAdmits, KeyCovers), the target's by the link (Responder::ExecuteDirect). What
// this lane does not take is posted the general way, which decides, answers and logs; both ways
// number the messages from one PSN counter and complete through one completer, so a program
// mixing them sees one send queue.
#include <cstring>

#include "fabric/host/hazard_lines.h"
#include "transport/codes.h"
#include "transport/indirect_key.h"
#include "transport/requester.h"

namespace softverbs::transport {
namespace {

bool LaneAtomic(WrOpcode op) { return op == WrOpcode::kAtomicCmpSwp || op == WrOpcode::kAtomicFetchAdd; }

// PlainlyValid's and GatherLocal's rules for what the lane takes: one of its four opcodes, a READ
// or atomic only with max_rd_atomic (IBA 11.2.4.2), an atomic's local buffer its 8-byte original
// (IBA 9.4.5), inline bytes within max_inline_data (a READ's or atomic's inline flag is ignored,
// as mlx5 does). A zero-length message is left to the general way.
bool LaneTakes(const OneSidedWr& wr, uint32_t max_rd_atomic, uint32_t max_inline) {
  if (wr.sge.length == 0) return false;
  switch (wr.opcode) {
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

}  // namespace

bool Requester::PostOneSided(const OneSidedWr& wr, uint32_t qp_state) {
  std::lock_guard lock(mu_);
  // Post's case of a work request executed at once: RTS, nothing queued, the queue not stopped.
  if (!lane_ || qp_state != qp_state::kRts || stopped_ || sig_stopped_ || !queue_.empty() ||
      !LaneTakes(wr, config_.max_rd_atomic, config_.max_inline))
    return false;
  DirectRequest d;
  d.opcode = wr.opcode;
  d.dest_qp = config_.dest_qp_num;
  d.length = wr.sge.length;
  d.remote_addr = wr.remote_addr;
  d.rkey = wr.rkey;
  d.compare_add = wr.compare_add;
  d.swap = wr.swap;
  // The local side: inline bytes where the application has them, or the SGE through one of the
  // kept lkeys, held (announced) until the bytes have moved.
  std::atomic<uint32_t>* hold = nullptr;
  if (wr.opcode == WrOpcode::kRdmaWrite && (wr.flags & send_flag::kInline)) {
    d.local = reinterpret_cast<void*>(wr.sge.addr);
  } else {
    const bool writes = wr.opcode != WrOpcode::kRdmaWrite;
    const KeyRule rule{config_.process_slot, config_.pd, writes ? access_bit::kLocalWrite : 0u, writes};
    const HeldKey& held = local_keys_[local_keys_[0].key() == wr.sge.lkey ? 0 : 1];
    hold = HoldHeldKey(fabric::ThisThreadHazards(local_), held, wr.sge.lkey, wr.sge.addr, wr.sge.length, rule, &d.local);
    if (hold == nullptr) return false;
  }
  Reply reply;
  const bool done = links_.host->CarryDirect(d, &reply);
  // The original value (AtomicAckETH) lands in the local buffer while its key is held.
  const bool atomic = LaneAtomic(wr.opcode);
  if (done && atomic && reply.code == ReplyCode::kAck) memcpy(d.local, &reply.original, 8);
  if (hold != nullptr) fabric::Retract(hold);
  if (!done) return false;
  // IBA 9.7.1: one PSN per packet (a READ: per response packet), as Execute numbers them.
  const uint64_t packets = atomic ? 1 : (d.length + config_.path_mtu - 1) / config_.path_mtu;
  next_psn_ = static_cast<uint32_t>((next_psn_ + packets) & 0xffffff);
  if (reply.code == ReplyCode::kAck)
    completer_.FinishOneSided(wr.wr_id, wr.opcode, wr.flags, d.length);
  else
    SettleOneSided(wr, reply);
  return true;
}

void Requester::SettleOneSided(const OneSidedWr& wr, const Reply& reply) {
  // (rare: the owner's file no longer held the range -- a NAK the completer fails, IBA 9.7.5.2.4)
  SendWr full;
  full.wr_id = wr.wr_id;
  full.opcode = wr.opcode;
  full.flags = wr.flags;
  full.num_sge = 1;
  full.sge[0] = wr.sge;
  full.remote_addr = wr.remote_addr;
  full.rkey = wr.rkey;
  full.compare_add = wr.compare_add;
  full.swap = wr.swap;
  RetryState retry = completer_.Budget();
  if (completer_.OnReply(full, retry, reply, wr.sge.length).kind == Completer::Verdict::kFailed) stopped_ = true;
}

}  // namespace softverbs::transport
