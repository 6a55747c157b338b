#include "transport/wire/packet_responder.h"

#include <endian.h>

#include "base/log.h"
#include "transport/codes.h"
#include "transport/responder.h"

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
using qp_type::kUc;
using qp_state::kRtr, qp_state::kSqe;  // a QP receives from RTR to SQE

// The request the packet's headers make; its payload is `piece`.
Request RequestOf(const packet::ParsedPacket& p, const QpEndpoint& e, iovec* piece) {
  const packet::OpcodeInfo& info = *p.info;
  Request r;
  r.qp_type = kUc;
  r.dest_qp = p.hdr.bth.dest_qp;
  r.src_qp = e.dest_qp_num;  // RC/UC: the connected QP (BTH carries no source QP)
  r.solicited = p.hdr.bth.se;
  const bool send = info.operation == packet::Operation::kSend;
  r.opcode = send ? (info.has_immediate ? WrOpcode::kSendWithImm : WrOpcode::kSend)
                  : (info.has_immediate ? WrOpcode::kRdmaWriteWithImm : WrOpcode::kRdmaWrite);
  r.imm_data = htobe32(p.hdr.immdt.imm);
  *piece = {const_cast<uint8_t*>(p.payload.data()), p.payload.size()};
  r.local = piece;
  r.local_count = 1;
  r.length = p.payload.size();
  return r;
}

// IBA 9.4 / rxe's check_length: FIRST and MIDDLE packets carry exactly the path MTU, LAST and
// ONLY at most that.
bool LengthFits(const packet::OpcodeInfo& info, size_t payload, uint32_t mtu) {
  if (info.ends_message()) return payload <= mtu;
  return payload == mtu;
}

void SendPacket(const TargetQp& t, WireReceive& w, const packet::OpcodeInfo& info, const Request& r) {
  if (info.starts_message()) {
    if (!w.wqe_held) {
      if (Responder::BeginReceive(t, r, &w.wqe).code != ReplyCode::kAck) return;  // UC: no WQE, dropped
      w.wqe_held = 1;
    }
    w.message = kSendInProgress;
    w.offset = 0;
  }
  if (Responder::PlaceReceive(t, w.wqe, w.offset, r).code != ReplyCode::kAck) {
    w.wqe_held = 0;  // completed in error at the target
    w.message = 0;
    return;
  }
  w.offset += r.length;
  if (!info.ends_message()) return;
  (void)Responder::CompleteReceive(t, w.wqe, r, w.offset);  // UC: no SEND_WITH_INV
  w.wqe_held = 0;
  w.message = 0;
}

void WritePacket(const TargetQp& t, WireReceive& w, const packet::ParsedPacket& p, const Request& r) {
  const packet::OpcodeInfo& info = *p.info;
  if (info.starts_message()) {
    // The whole message is checked at its first packet (rxe check_rkey): one that would end
    // outside the MR is dropped before a byte lands (UC: silently, IBA 9.8.3).
    if (p.hdr.reth.length > (1ull << 31) ||
        Responder::CheckRange(t, p.hdr.reth.rkey, p.hdr.reth.va, p.hdr.reth.length, true).code != ReplyCode::kAck) {
      w.message = 0;
      return;
    }
    w.va = p.hdr.reth.va;
    w.rkey = p.hdr.reth.rkey;
    w.dma_length = p.hdr.reth.length;
    w.offset = 0;
    w.message = kWriteInProgress;
  }
  // IBA 9.7.4.1.5: the packets together carry exactly the RETH's DMA length.
  if (w.offset + r.length > w.dma_length || (info.ends_message() && w.offset + r.length != w.dma_length)) {
    w.message = 0;
    return;
  }
  Request write = r;
  write.opcode = WrOpcode::kRdmaWrite;
  write.remote_addr = w.va + w.offset;
  write.rkey = w.rkey;
  if (Responder::Execute(t, write).code != ReplyCode::kAck) {
    w.message = 0;  // UC: a refused write is dropped silently (IBA 9.8.3)
    return;
  }
  w.offset += r.length;
  if (!info.ends_message()) return;
  w.message = 0;
  if (!info.has_immediate) return;
  // RDMA WRITE with immediate consumes a receive WQE when the message ends (IBA 9.4.2).
  TakenWqe wqe;
  if (Responder::BeginReceive(t, r, &wqe).code == ReplyCode::kAck) (void)Responder::CompleteReceive(t, wqe, r, w.offset);
}

}  // namespace

void PacketResponder::ReceiveUc(const TargetQp& t, const packet::ParsedPacket& p) {
  const packet::OpcodeInfo& info = *p.info;
  const QpEndpoint& e = t.endpoint();
  WireReceive& w = t.endpoint().wire;
  // IBA 9.6.1.1 / rxe check_type_state: a UC packet for a QP of another transport (or one not
  // receiving, 10.3.1) is discarded before it touches the QP's receive state. An RC QP's
  // expected PSN shares that state: a stray UC packet used to move it, and the RC requester's
  // next message was then taken for a duplicate and never delivered.
  const uint32_t state = e.state.load(std::memory_order_acquire);
  if (e.type != kUc || state < kRtr || state > kSqe) return;
  fabric::RobustLock lock(w.lock);
  const uint32_t psn = p.hdr.bth.psn;
  w.counters.packets.fetch_add(1, std::memory_order_relaxed);
  // IBA 9.8.3: out of sequence, the message in progress is lost; a message start is taken at any
  // PSN and restarts the sequence (rxe check_psn, IB_QPT_UC).
  if (!info.starts_message() && (w.message == 0 || psn != w.epsn)) {
    if (w.message != 0) w.counters.dropped.fetch_add(1, std::memory_order_relaxed);
    w.message = 0;
    return;
  }
  const bool send = info.operation == packet::Operation::kSend;
  if (!info.starts_message() && (w.message == kSendInProgress) != send) {  // IBA 9.8.3: opcode order
    w.message = 0;
    return;
  }
  w.epsn = (psn + 1) & packet::kPsnMask;
  if (info.starts_message() && w.message != 0) {  // the previous message never ended
    w.counters.dropped.fetch_add(1, std::memory_order_relaxed);
    w.message = 0;
  }
  iovec piece;
  const Request r = RequestOf(p, e, &piece);
  if (!LengthFits(info, p.payload.size(), e.mtu)) {
    w.message = 0;
    return;
  }
  if (send)
    SendPacket(t, w, info, r);
  else
    WritePacket(t, w, p, r);
}

}  // namespace softverbs::transport
