#include "transport/wire/rc_responder.h"

#include <endian.h>

#include <vector>

#include "base/log.h"
#include "transport/codes.h"
#include "transport/responder.h"
#include "transport/wire/wire_packets.h"

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
using qp_type::kRc;
using qp_state::kRtr, qp_state::kSqe;
constexpr uint32_t kReadResource = 1, kAtomicResource = 2;
// IBA 9.4.4 / rxe (resp check_rkey): a message carries at most 2^31 bytes.
constexpr uint64_t kMaxMessage = 1ull << 31;
// A READ's data is fetched this much at a time (a whole number of packets of any path MTU).
constexpr uint64_t kReadChunk = 64 * 1024;

using fabric::packet::PsnDiff;

uint8_t SyndromeOf(ReplyCode code) {
  switch (code) {
    case ReplyCode::kRemoteAccess: return syndrome::kRemoteAccess;
    case ReplyCode::kInvalidRequest: return syndrome::kInvalidRequest;
    default: return syndrome::kRemoteOp;
  }
}

// One packet's work, with what the responder answers.
class Packet {
 public:
  Packet(const TargetQp& t, const packet::ParsedPacket& p, const ResponsePath& path, RendezvousRead* rndv)
      : t_(t), e_(t.endpoint()), w_(e_.wire), p_(p), info_(*p.info), path_(path), rndv_(rndv) {}
  void Receive();

 private:
  Request RequestOf() {
    Request r;
    r.qp_type = kRc;
    r.dest_qp = e_.qp_num;
    r.src_qp = e_.dest_qp_num;  // RC: the connected QP (BTH carries no source QP)
    r.solicited = p_.hdr.bth.se;
    const bool send = info_.operation == packet::Operation::kSend;
    r.opcode = send ? (info_.has_invalidate ? WrOpcode::kSendWithInv
                       : info_.has_immediate ? WrOpcode::kSendWithImm : WrOpcode::kSend)
                    : (info_.has_immediate ? WrOpcode::kRdmaWriteWithImm : WrOpcode::kRdmaWrite);
    r.imm_data = htobe32(p_.hdr.immdt.imm);
    r.invalidate_rkey = p_.hdr.ieth.rkey;
    piece_ = {const_cast<uint8_t*>(p_.payload.data()), p_.payload.size()};
    r.local = &piece_;
    r.local_count = 1;
    r.length = p_.payload.size();
    return r;
  }
  void Send(std::span<const uint8_t> bytes) {
    const iovec one{const_cast<uint8_t*>(bytes.data()), bytes.size()};
    (void)path_.send({&one, 1}, {});
  }
  void Ack(uint8_t syn, uint32_t psn) {
    Count(syn);
    uint8_t buffer[64];
    auto n = BuildAck(e_.dest_qp_num, psn, syn, w_.msn, path_.flow, buffer);
    if (!n.ok()) return;
    // (Not held before a rendezvous READ: the sender learns its SEND arrived before the READ
    // of its buffer reaches it, as from a NIC, which ACKs the RNDV message and then READs.)
    if (syn == syndrome::kAck && path_.coalesce_ack && rndv_->qp_num == 0)
      path_.coalesce_ack({buffer, *n});
    else
      Send({buffer, *n});
  }
  void Count(uint8_t syn) {
    WireResponderCounters& c = w_.counters;
    const uint8_t kind = syn & 0x60;  // IBA 9.7.5.2.1: AETH syndrome bits 6:5 (00 ACK, 01 RNR, 11 NAK)
    auto& n = kind == 0 ? c.acks : kind == syndrome::kRnr ? c.naks_rnr
              : syn == syndrome::kPsnSequence ? c.naks_sequence : c.naks_error;
    n.fetch_add(1, std::memory_order_relaxed);
  }
  // A NAK with an error syndrome: the message is lost and the QP enters ERR (the responder's
  // own failure already moved it there, IBA 9.9.3.1).
  void Nak(ReplyCode code) {
    w_.message = 0;
    Ack(SyndromeOf(code), p_.hdr.bth.psn);
  }
  // A class C error this front end finds itself (opcode sequence, lengths; IBA 9.9.3.1.2, rxe
  // do_class_ac_error): NAK invalid request, and the QP enters ERR as rxe's and a NIC's do.
  void Invalid() {
    Responder::EnterError(t_);
    Nak(ReplyCode::kInvalidRequest);
  }
  void Advance() {
    w_.epsn = (p_.hdr.bth.psn + 1) & packet::kPsnMask;
    if (info_.ends_message()) ++w_.msn;
    if (p_.hdr.bth.ack_req || info_.ends_message()) Ack(syndrome::kAck, p_.hdr.bth.psn);
  }
  void SendPacket();
  void WritePacket();
  void ReadRequest(bool duplicate);
  void Atomic();
  void Duplicate();
  WireResource& NewResource() {
    WireResource& r = w_.resource[w_.next_resource++ % kWireResources];
    r = WireResource{};
    return r;
  }

  const TargetQp& t_;
  QpEndpoint& e_;
  WireReceive& w_;
  const packet::ParsedPacket& p_;
  const packet::OpcodeInfo& info_;
  const ResponsePath& path_;
  RendezvousRead* rndv_;  // a tag matching rendezvous READ to start once the lock is released
  iovec piece_{};
};

void Packet::SendPacket() {
  const Request r = RequestOf();
  if (info_.starts_message()) {
    if (!w_.wqe_held) {
      const Reply begin = Responder::BeginReceive(t_, r, &w_.wqe, &w_.tm);
      if (begin.code == ReplyCode::kRnr) return Ack(static_cast<uint8_t>(syndrome::kRnr | begin.rnr_timer), p_.hdr.bth.psn);
      if (begin.code != ReplyCode::kAck) return;  // not receiving: silence
      w_.wqe_held = 1;
    }
    w_.message = kSendInProgress;
    w_.offset = 0;
  }
  if (const Reply placed = Responder::PlaceReceive(t_, w_.wqe, w_.offset, r, &w_.tm); placed.code != ReplyCode::kAck) {
    w_.wqe_held = 0;  // completed in error at the target
    return Nak(placed.code);
  }
  w_.offset += r.length;
  if (info_.ends_message()) {
    const Reply done = Responder::CompleteReceive(t_, w_.wqe, r, w_.offset, &w_.tm, rndv_);
    w_.wqe_held = 0;
    w_.message = 0;
    if (done.code != ReplyCode::kAck) return Nak(done.code);
  }
  Advance();
}

void Packet::WritePacket() {
  const Request r = RequestOf();
  if (info_.starts_message()) {
    // The whole message is checked at its first packet (rxe check_rkey): one that would end
    // outside the MR writes nothing at all.
    if (p_.hdr.reth.length > kMaxMessage) return Invalid();
    const Reply range = Responder::CheckRange(t_, p_.hdr.reth.rkey, p_.hdr.reth.va, p_.hdr.reth.length, true);
    if (range.code != ReplyCode::kAck) return Nak(range.code);
    w_.va = p_.hdr.reth.va;
    w_.rkey = p_.hdr.reth.rkey;
    w_.dma_length = p_.hdr.reth.length;
    w_.offset = 0;
    w_.message = kWriteInProgress;
  }
  // IBA 9.7.4.1.5 / rxe: the packets carry exactly the RETH's DMA length.
  if (w_.offset + r.length > w_.dma_length || (info_.ends_message() && w_.offset + r.length != w_.dma_length))
    return Invalid();
  Request write = r;
  write.opcode = WrOpcode::kRdmaWrite;
  write.remote_addr = w_.va + w_.offset;
  write.rkey = w_.rkey;
  if (const Reply done = Responder::Execute(t_, write); done.code != ReplyCode::kAck) {
    if (done.code == ReplyCode::kNoAnswer) return;  // not receiving: silence
    return Nak(done.code);
  }
  if (info_.ends_message() && info_.has_immediate) {
    // RDMA WRITE with immediate consumes a receive WQE at its end (IBA 9.4.2).
    TakenWqe wqe;
    const Reply begin = Responder::BeginReceive(t_, r, &wqe);
    if (begin.code == ReplyCode::kRnr) return Ack(static_cast<uint8_t>(syndrome::kRnr | begin.rnr_timer), p_.hdr.bth.psn);
    if (begin.code == ReplyCode::kAck) (void)Responder::CompleteReceive(t_, wqe, r, w_.offset + r.length);
  }
  w_.offset += r.length;
  if (info_.ends_message()) w_.message = 0;
  Advance();
}

void Packet::ReadRequest(bool duplicate) {
  const uint64_t length = p_.hdr.reth.length;
  const uint32_t mtu = e_.mtu ? e_.mtu : 4096;
  // Checked whole before a byte is fetched or a buffer sized by the RETH is allocated.
  if (length > kMaxMessage) return Invalid();
  const Reply range = Responder::CheckRange(t_, p_.hdr.reth.rkey, p_.hdr.reth.va, length, false);
  if (range.code != ReplyCode::kAck) return Nak(range.code);
  const uint32_t packets = length == 0 ? 1 : static_cast<uint32_t>((length + mtu - 1) / mtu);
  if (!duplicate) {
    WireResource& res = NewResource();
    res = {kReadResource, p_.hdr.bth.psn, packets, p_.hdr.reth.rkey, p_.hdr.reth.va, length, 0};
    w_.epsn = (p_.hdr.bth.psn + packets) & packet::kPsnMask;
    ++w_.msn;  // C9-148: a READ counts when it is received
  }
  // IBA 9.7.5.1.1: a duplicate READ is executed again (its data may have changed). The data is
  // fetched a chunk at a time; each chunk's packets are built around it (headers and ICRCs in
  // this thread's arena) and sent in batches, in as few system calls as the kernel allows (as
  // the requester's messages are).
  constexpr size_t kBatch = 64;
  thread_local std::vector<uint8_t> wrap(kBatch * kWrapSlot);
  thread_local std::vector<iovec> pieces;
  thread_local std::vector<uint16_t> counts;
  std::vector<uint8_t> data(std::min<uint64_t>(length, kReadChunk / mtu * mtu));
  uint32_t index = 0;
  uint64_t at = 0;
  do {
    const uint64_t n = std::min<uint64_t>(data.size(), length - at);
    iovec into{data.data(), n};
    Request r;
    r.qp_type = kRc;
    r.opcode = WrOpcode::kRdmaRead;
    r.dest_qp = e_.qp_num;
    r.local = &into;
    r.local_count = 1;
    r.length = n;
    r.remote_addr = p_.hdr.reth.va + at;
    r.rkey = p_.hdr.reth.rkey;
    if (const Reply done = Responder::Execute(t_, r); done.code != ReplyCode::kAck) {
      if (done.code == ReplyCode::kNoAnswer) return;
      return Nak(done.code);
    }
    pieces.clear();
    counts.clear();
    uint64_t off = 0;
    do {  // (a zero-length READ: one empty ONLY response)
      const std::span<const uint8_t> piece(data.data() + off, std::min<uint64_t>(mtu, n - off));
      const Status built = GatherReadResponsePacket(e_.dest_qp_num, (p_.hdr.bth.psn + index) & packet::kPsnMask,
                                                    w_.msn, index == 0, index + 1 == packets, piece, path_.flow,
                                                    {wrap.data() + counts.size() * kWrapSlot, kWrapSlot}, pieces, counts);
      (void)built;  // (cannot fail: the opcodes are valid and the piece is at most the MTU)
      ++index;
      off += mtu;
      if (counts.size() == kBatch || (off >= n && !counts.empty())) {
        if (!path_.send(pieces, counts).ok()) return;  // lost: the requester reads again
        pieces.clear();
        counts.clear();
      }
    } while (off < n);
    at += n;
  } while (at < length);
}

void Packet::Atomic() {
  Request r;
  r.qp_type = kRc;
  r.opcode = info_.operation == packet::Operation::kCompareSwap ? WrOpcode::kAtomicCmpSwp : WrOpcode::kAtomicFetchAdd;
  r.dest_qp = e_.qp_num;
  r.length = 8;
  r.remote_addr = p_.hdr.atomic.va;
  r.rkey = p_.hdr.atomic.rkey;
  r.compare_add = r.opcode == WrOpcode::kAtomicCmpSwp ? p_.hdr.atomic.compare : p_.hdr.atomic.swap_add;
  r.swap = p_.hdr.atomic.swap_add;
  const Reply done = Responder::Execute(t_, r);
  if (done.code == ReplyCode::kNoAnswer) return;
  if (done.code != ReplyCode::kAck) return Nak(done.code);
  WireResource& res = NewResource();
  res = {kAtomicResource, p_.hdr.bth.psn, 1, r.rkey, r.remote_addr, 8, done.original};
  w_.epsn = (p_.hdr.bth.psn + 1) & packet::kPsnMask;
  ++w_.msn;
  uint8_t buffer[96];
  if (auto n = BuildAtomicAck(e_.dest_qp_num, p_.hdr.bth.psn, w_.msn, done.original, path_.flow, buffer); n.ok())
    Send({buffer, *n});
}

void Packet::Duplicate() {
  const uint32_t psn = p_.hdr.bth.psn;
  if (info_.operation == packet::Operation::kRdmaReadRequest || info_.operation == packet::Operation::kCompareSwap ||
      info_.operation == packet::Operation::kFetchAdd) {
    for (const WireResource& res : w_.resource) {
      if (res.kind == 0 || PsnDiff(psn, res.psn) < 0 || PsnDiff(psn, res.psn) >= static_cast<int32_t>(res.packets))
        continue;
      if (res.kind == kReadResource) {
        // rxe duplicate_request: served again only within the READ it repeats, with its R_Key.
        const uint64_t va = p_.hdr.reth.va, len = p_.hdr.reth.length;
        if (p_.hdr.reth.rkey != res.rkey || va < res.va || len > res.length || va - res.va > res.length - len)
          return;
        return ReadRequest(/*duplicate=*/true);
      }
      uint8_t buffer[96];  // an atomic is never executed twice: its result is replayed
      if (auto n = BuildAtomicAck(e_.dest_qp_num, res.psn, w_.msn, res.original, path_.flow, buffer); n.ok())
        Send({buffer, *n});
      return;
    }
    return;  // no resource left for it: silently dropped (IBA 9.7.5.1.1, class D)
  }
  // A duplicate SEND or WRITE: acknowledge what was received (C9-105: the PSN before the next
  // expected), so a requester whose ACK was lost moves on.
  if (p_.hdr.bth.ack_req) Ack(syndrome::kAck, (w_.epsn - 1) & packet::kPsnMask);
}

void Packet::Receive() {
  const uint32_t state = e_.state.load(std::memory_order_acquire);
  if (e_.type != kRc || e_.dct || state < kRtr || state > kSqe) return;  // IBA 10.3.1: not receiving
  // A responder error moved the QP to ERR (its owner applies it at its next verb): nothing more
  // is executed or answered meanwhile, as rxe's QP in ERR drops what arrives.
  if (e_.remote_error.load(std::memory_order_acquire) != 0) return;
  const int32_t diff = PsnDiff(p_.hdr.bth.psn, w_.epsn);
  w_.counters.packets.fetch_add(1, std::memory_order_relaxed);
  if (diff != 0) (diff > 0 ? w_.counters.out_of_sequence : w_.counters.duplicates).fetch_add(1, std::memory_order_relaxed);
  if (diff > 0) {  // a gap: one sequence NAK naming the PSN expected (IBA 9.7.5.1.1; rxe)
    if (!w_.nak_sent) Ack(syndrome::kPsnSequence, w_.epsn);
    w_.nak_sent = 1;
    return;
  }
  if (diff < 0) return Duplicate();
  w_.nak_sent = 0;
  const bool send = info_.operation == packet::Operation::kSend;
  const bool write = info_.operation == packet::Operation::kRdmaWrite;
  // IBA 9.8.2 / rxe check_op_seq: MIDDLE and LAST continue a message of their kind; a new one
  // starts only between messages.
  const uint32_t kind = send ? kSendInProgress : write ? kWriteInProgress : 0;
  if (info_.starts_message() ? w_.message != 0 : w_.message != kind) return Invalid();
  // IBA 9.4 / rxe check_length: FIRST and MIDDLE carry exactly the MTU, LAST and ONLY at most it.
  const size_t n = p_.payload.size();
  if ((send || write) && (info_.ends_message() ? n > e_.mtu : n != e_.mtu)) return Invalid();
  if (send) return SendPacket();
  if (write) return WritePacket();
  if (info_.operation == packet::Operation::kRdmaReadRequest) return ReadRequest(false);
  if (info_.operation == packet::Operation::kCompareSwap || info_.operation == packet::Operation::kFetchAdd)
    return Atomic();
}

}  // namespace

void RcResponder::Receive(const TargetQp& t, const packet::ParsedPacket& p, const ResponsePath& path) {
  RendezvousRead rndv;
  {
    fabric::RobustLock lock(t.endpoint().wire.lock);
    Packet(t, p, path, &rndv).Receive();
  }
  // The READ leaves from the QP's own send queue, outside its packet state's lock (the owner's
  // requester has locks of its own; transport/rendezvous.h).
  if (rndv.qp_num != 0) Responder::StartRendezvous(t, rndv);
}

}  // namespace softverbs::transport
