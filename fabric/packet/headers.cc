#include "fabric/packet/headers.h"

namespace softverbs::fabric::packet {
namespace {

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void Put24(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}
void Put32(uint8_t* p, uint32_t v) {
  Put16(p, static_cast<uint16_t>(v >> 16));
  Put16(p + 2, static_cast<uint16_t>(v));
}
void Put64(uint8_t* p, uint64_t v) {
  Put32(p, static_cast<uint32_t>(v >> 32));
  Put32(p + 4, static_cast<uint32_t>(v));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Get24(const uint8_t* p) { return uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2]; }
uint32_t Get32(const uint8_t* p) { return uint32_t{Get16(p)} << 16 | Get16(p + 2); }
uint64_t Get64(const uint8_t* p) { return uint64_t{Get32(p)} << 32 | Get32(p + 4); }

}  // namespace

// BTH byte 1: SE(7) MigReq(6) PadCnt(5:4) TVer(3:0); byte 4: FECN(7) BECN(6) resv6; byte 8:
// AckReq(7) resv7 (IBA 9.2, rxe_hdr.h BTH_*_MASK).
void EncodeBth(const Bth& h, uint8_t* p) {
  p[0] = h.opcode;
  p[1] = static_cast<uint8_t>((h.se ? 0x80 : 0) | (h.mig ? 0x40 : 0) | (h.pad & 3) << 4 |
                              (h.tver & 0xf));
  Put16(p + 2, h.pkey);
  p[4] = static_cast<uint8_t>((h.fecn ? 0x80 : 0) | (h.becn ? 0x40 : 0));
  Put24(p + 5, h.dest_qp & kQpnMask);
  p[8] = h.ack_req ? 0x80 : 0;
  Put24(p + 9, h.psn & kPsnMask);
}

Bth DecodeBth(const uint8_t* p) {
  Bth h;
  h.opcode = p[0];
  h.se = p[1] & 0x80;
  h.mig = p[1] & 0x40;
  h.pad = (p[1] >> 4) & 3;
  h.tver = p[1] & 0xf;
  h.pkey = Get16(p + 2);
  h.fecn = p[4] & 0x80;
  h.becn = p[4] & 0x40;
  h.dest_qp = Get24(p + 5);
  h.ack_req = p[8] & 0x80;
  h.psn = Get24(p + 9);
  return h;
}

void EncodeReth(const Reth& h, uint8_t* p) {
  Put64(p, h.va);
  Put32(p + 8, h.rkey);
  Put32(p + 12, h.length);
}
Reth DecodeReth(const uint8_t* p) { return {Get64(p), Get32(p + 8), Get32(p + 12)}; }

void EncodeAeth(const Aeth& h, uint8_t* p) {
  p[0] = h.syndrome;
  Put24(p + 1, h.msn & kPsnMask);
}
Aeth DecodeAeth(const uint8_t* p) { return {p[0], Get24(p + 1)}; }

void EncodeAtomicEth(const AtomicEth& h, uint8_t* p) {
  Put64(p, h.va);
  Put32(p + 8, h.rkey);
  Put64(p + 12, h.swap_add);
  Put64(p + 20, h.compare);
}
AtomicEth DecodeAtomicEth(const uint8_t* p) {
  return {Get64(p), Get32(p + 8), Get64(p + 12), Get64(p + 20)};
}

void EncodeAtomicAckEth(const AtomicAckEth& h, uint8_t* p) { Put64(p, h.original); }
AtomicAckEth DecodeAtomicAckEth(const uint8_t* p) { return {Get64(p)}; }

void EncodeDeth(const Deth& h, uint8_t* p) {
  Put32(p, h.qkey);
  p[4] = 0;  // reserved
  Put24(p + 5, h.src_qp & kQpnMask);
}
Deth DecodeDeth(const uint8_t* p) { return {Get32(p), Get24(p + 5)}; }

void EncodeExtensions(const OpcodeInfo& info, const PacketHeaders& h, uint8_t* p) {
  uint8_t* at = p + kBthBytes;
  for (uint8_t i = 0; i < info.ext_count; ++i) {
    switch (info.ext[i]) {
      case Ext::kReth: EncodeReth(h.reth, at); break;
      case Ext::kAeth: EncodeAeth(h.aeth, at); break;
      case Ext::kAtomicEth: EncodeAtomicEth(h.atomic, at); break;
      case Ext::kAtomicAckEth: EncodeAtomicAckEth(h.atomic_ack, at); break;
      case Ext::kDeth: EncodeDeth(h.deth, at); break;
      case Ext::kImmDt: Put32(at, h.immdt.imm); break;
      case Ext::kIeth: Put32(at, h.ieth.rkey); break;
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
      case Ext::kImmDt: h->immdt.imm = Get32(at); break;
      case Ext::kIeth: h->ieth.rkey = Get32(at); break;
    }
    at += ExtBytes(info.ext[i]);
  }
}

}  // namespace softverbs::fabric::packet
