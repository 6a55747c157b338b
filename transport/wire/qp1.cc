#include "transport/wire/qp1.h"

#include <string>

namespace softverbs::transport {

namespace packet = fabric::packet;

bool PkeyMatch(uint16_t a, uint16_t b) {
  if ((a & 0x7fff) == 0 || (b & 0x7fff) == 0) return false;
  return (a & 0x7fff) == (b & 0x7fff) && ((a & 0x8000) != 0 || (b & 0x8000) != 0);
}

Status CheckQp1Packet(const packet::ParsedPacket& p) {
  char b[96];
  if (p.info->transport != packet::Transport::kUd) {
    snprintf(b, sizeof b, "opcode %s to QP1: the GSI QP is UD (rxe_recv.c check_type_state)", p.info->name);
    return Invalid(b);
  }
  if (!PkeyMatch(p.hdr.bth.pkey, kGsiPkey)) {
    snprintf(b, sizeof b, "P_Key 0x%04x to QP1 does not match 0xffff (rxe_recv.c check_keys)", p.hdr.bth.pkey);
    return Invalid(b);
  }
  if (p.hdr.deth.qkey != kGsiQkey) {
    snprintf(b, sizeof b, "Q_Key 0x%08x to QP1 is not GSI_QKEY 0x80010000 (rxe_recv.c check_keys)", p.hdr.deth.qkey);
    return Invalid(b);
  }
  if (p.payload.size() > kMadBytes)
    return Invalid("a " + std::to_string(p.payload.size()) + "-byte payload to QP1 exceeds its 256-byte MAD "
                   "buffers (rxe_resp.c rxe_resp_check_length)");
  return Status::Ok();
}

Result<size_t> BuildMadPacket(std::span<const uint8_t> mad, uint32_t psn, const packet::IpUdpInfo& flow,
                              std::span<uint8_t> out) {
  if (mad.size() != kMadBytes)
    return Invalid("a MAD is 256 bytes, not " + std::to_string(mad.size()) + " (IBA 13.4.1)");
  packet::PacketHeaders h;
  h.bth.opcode = static_cast<uint8_t>(packet::op::kUd | packet::op::kSendOnly);
  h.bth.pkey = kGsiPkey;
  h.bth.dest_qp = kQp1;
  h.bth.ack_req = true;  // rxe_req.c: every UD packet ends its message
  h.bth.psn = psn & packet::kPsnMask;
  h.deth.qkey = kGsiQkey;  // rxe_req.c: "if (qp->ibqp.qp_num == 1) deth_set_qkey(pkt, GSI_QKEY)"
  h.deth.src_qp = kQp1;
  const packet::ConstBuffer payload[] = {{mad.data(), mad.size()}};
  return packet::Build(h, payload, flow, out);
}

}  // namespace softverbs::transport
