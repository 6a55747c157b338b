#include "fabric/packet/headers.h"

#include "base/big_endian.h"

namespace softverbs::fabric::packet {

// BTH byte 1: SE(7) MigReq(6) PadCnt(5:4) TVer(3:0); byte 4: FECN(7) BECN(6) resv6; byte 8:
// AckReq(7) resv7 (IBA 9.2, rxe_hdr.h BTH_*_MASK).
void EncodeBth(const Bth& h, uint8_t* p) {
  p[0] = h.opcode;
  p[1] = static_cast<uint8_t>((h.se ? 0x80 : 0) | (h.mig ? 0x40 : 0) | (h.pad & 3) << 4 |
                              (h.tver & 0xf));
  PutBe16(p + 2, h.pkey);
  p[4] = static_cast<uint8_t>((h.fecn ? 0x80 : 0) | (h.becn ? 0x40 : 0));
  PutBe24(p + 5, h.dest_qp & kQpnMask);
  p[8] = h.ack_req ? 0x80 : 0;
  PutBe24(p + 9, h.psn & kPsnMask);
}

Bth DecodeBth(const uint8_t* p) {
  Bth h;
  h.opcode = p[0];
  h.se = p[1] & 0x80;
  h.mig = p[1] & 0x40;
  h.pad = (p[1] >> 4) & 3;
  h.tver = p[1] & 0xf;
  h.pkey = Be16(p + 2);
  h.fecn = p[4] & 0x80;
  h.becn = p[4] & 0x40;
  h.dest_qp = Be24(p + 5);
  h.ack_req = p[8] & 0x80;
  h.psn = Be24(p + 9);
  return h;
}

void EncodeReth(const Reth& h, uint8_t* p) {
  PutBe64(p, h.va);
  PutBe32(p + 8, h.rkey);
  PutBe32(p + 12, h.length);
}
Reth DecodeReth(const uint8_t* p) { return {Be64(p), Be32(p + 8), Be32(p + 12)}; }

void EncodeAeth(const Aeth& h, uint8_t* p) {
  p[0] = h.syndrome;
  PutBe24(p + 1, h.msn & kPsnMask);
}
Aeth DecodeAeth(const uint8_t* p) { return {p[0], Be24(p + 1)}; }

void EncodeAtomicEth(const AtomicEth& h, uint8_t* p) {
  PutBe64(p, h.va);
  PutBe32(p + 8, h.rkey);
  PutBe64(p + 12, h.swap_add);
  PutBe64(p + 20, h.compare);
}
AtomicEth DecodeAtomicEth(const uint8_t* p) {
  return {Be64(p), Be32(p + 8), Be64(p + 12), Be64(p + 20)};
}

void EncodeAtomicAckEth(const AtomicAckEth& h, uint8_t* p) { PutBe64(p, h.original); }
AtomicAckEth DecodeAtomicAckEth(const uint8_t* p) { return {Be64(p)}; }

void EncodeDeth(const Deth& h, uint8_t* p) {
  PutBe32(p, h.qkey);
  p[4] = 0;  // reserved
  PutBe24(p + 5, h.src_qp & kQpnMask);
}
Deth DecodeDeth(const uint8_t* p) { return {Be32(p), Be24(p + 5)}; }

void EncodeExtensions(const OpcodeInfo& info, const PacketHeaders& h, uint8_t* p) {
  uint8_t* at = p + kBthBytes;
  for (uint8_t i = 0; i < info.ext_count; ++i) {
    switch (info.ext[i]) {
      case Ext::kReth: EncodeReth(h.reth, at); break;
      case Ext::kAeth: EncodeAeth(h.aeth, at); break;
      case Ext::kAtomicEth: EncodeAtomicEth(h.atomic, at); break;
      case Ext::kAtomicAckEth: EncodeAtomicAckEth(h.atomic_ack, at); break;
      case Ext::kDeth: EncodeDeth(h.deth, at); break;
      case Ext::kImmDt: PutBe32(at, h.immdt.imm); break;
      case Ext::kIeth: PutBe32(at, h.ieth.rkey); break;
    }
    at += ExtBytes(info.ext[i]);
  }
}

void DecodeExtensions(const OpcodeInfo& info, const uint8_t* p, PacketHeaders* h) {
  const uint8_t* at = p + kBthBytes;
  for (uint8_t i = 0; i < info.ext_count; ++i) {
    switch (info.ext[i]) {
      case Ext::kReth: h->reth = DecodeReth(at); break;
      case Ext::kAeth: h->aeth = DecodeAeth(at); break;
      case Ext::kAtomicEth: h->atomic = DecodeAtomicEth(at); break;
      case Ext::kAtomicAckEth: h->atomic_ack = DecodeAtomicAckEth(at); break;
      case Ext::kDeth: h->deth = DecodeDeth(at); break;
      case Ext::kImmDt: h->immdt.imm = Be32(at); break;
      case Ext::kIeth: h->ieth.rkey = Be32(at); break;
    }
    at += ExtBytes(info.ext[i]);
  }
}

}  // namespace softverbs::fabric::packet
