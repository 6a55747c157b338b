#include "transport/wire/wire_packets.h"

#include <endian.h>

#include <vector>

namespace softverbs::transport {
namespace {

namespace packet = fabric::packet;
constexpr uint32_t kUd = 4;

}  // namespace

bool RequestOfPacket(const packet::ParsedPacket& p, WireRequest* out) {
  const packet::OpcodeInfo& info = *p.info;
  if (info.transport != packet::Transport::kUd || info.operation != packet::Operation::kSend) return false;
  Request& r = out->request;
  r = Request{};
  r.qp_type = kUd;
  r.opcode = info.has_immediate ? WrOpcode::kSendWithImm : WrOpcode::kSend;
  r.dest_qp = p.hdr.bth.dest_qp;
  r.src_qp = p.hdr.deth.src_qp;
  r.qkey = p.hdr.deth.qkey;
  r.solicited = p.hdr.bth.se;
  r.imm_data = htobe32(p.hdr.immdt.imm);  // ibv_wc.imm_data is in network order
  out->piece = {const_cast<uint8_t*>(p.payload.data()), p.payload.size()};
  r.local = &out->piece;
  r.local_count = 1;
  r.length = p.payload.size();
  return true;
}

Result<size_t> BuildDatagram(const Request& r, uint32_t psn, const packet::IpUdpInfo& flow, std::span<uint8_t> out) {
  packet::PacketHeaders h;
  h.bth.opcode = static_cast<uint8_t>(packet::op::kUd | (r.with_imm() ? packet::op::kSendOnlyWithImmediate
                                                                       : packet::op::kSendOnly));
  h.bth.se = r.solicited;
  h.bth.dest_qp = r.dest_qp & packet::kQpnMask;
  h.bth.psn = psn & packet::kPsnMask;
  h.bth.ack_req = true;  // every UD packet ends its message (rxe sets it; receivers ignore it)
  h.deth.qkey = r.qkey;
  h.deth.src_qp = r.src_qp & packet::kQpnMask;
  h.immdt.imm = be32toh(r.imm_data);
  std::vector<packet::ConstBuffer> payload(r.local_count);
  for (size_t i = 0; i < r.local_count; ++i) payload[i] = {r.local[i].iov_base, r.local[i].iov_len};
  return packet::Build(h, payload, flow, out);
}

}  // namespace softverbs::transport
