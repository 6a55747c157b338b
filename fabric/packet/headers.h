// The RoCEv2 transport headers as typed values, and their big-endian encoding (IBA Vol 1 9.2 BTH,
// 9.3 extension headers; layouts as in the kernel's rxe_hdr.h).
#pragma once

#include <cstdint>

#include "fabric/packet/opcode.h"

namespace softverbs::fabric::packet {

inline constexpr uint32_t kQpnMask = 0xffffff;  // QPNs and PSNs are 24 bits
inline constexpr uint32_t kPsnMask = 0xffffff;
// a - b in 24-bit PSN arithmetic (IBA 9.7.1: PSNs wrap; half the space lies ahead).
inline int32_t PsnDiff(uint32_t a, uint32_t b) { return static_cast<int32_t>((a - b) << 8) >> 8; }

// Base Transport Header, 12 bytes (IBA 9.2). Reserved bits are sent as zero and ignored.
struct Bth {
  uint8_t opcode = 0;
  bool se = false;       // solicited event
  bool mig = false;      // MigReq
  uint8_t pad = 0;       // PadCnt, 2 bits: bytes after the payload up to a 4-byte boundary
  uint8_t tver = 0;      // transport header version, 4 bits; 0 is the only one defined
  uint16_t pkey = 0xffff;
  bool fecn = false;     // congestion notification bits (byte 4, masked out of the ICRC)
  bool becn = false;
  uint32_t dest_qp = 0;  // 24 bits
  bool ack_req = false;
  uint32_t psn = 0;      // 24 bits
};

// RDMA Extended Transport Header, 16 bytes (IBA 9.3).
struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;  // DMA length of the whole message
};

// ACK Extended Transport Header, 4 bytes (IBA 9.3).
struct Aeth {
  uint8_t syndrome = 0;  // ACK / RNR NAK / NAK code
  uint32_t msn = 0;      // 24 bits
};

// Atomic Extended Transport Header, 28 bytes (IBA 9.3).
struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
};

// Atomic Acknowledge Extended Transport Header, 8 bytes (IBA 9.3).
struct AtomicAckEth {
  uint64_t original = 0;  // the remote data before the operation
};

// Datagram Extended Transport Header, 8 bytes (IBA 9.3): Q_Key, 8 reserved bits, source QP.
struct Deth {
  uint32_t qkey = 0;
  uint32_t src_qp = 0;  // 24 bits
};

// Immediate Data (IBA 9.3) and Invalidate (IBA 9.3) headers, 4 bytes each. The immediate
// is the big-endian number on the wire, so an ibv_send_wr's imm_data (already in network order)
// is be32toh(imm_data) here.
struct ImmDt {
  uint32_t imm = 0;
};
struct Ieth {
  uint32_t rkey = 0;
};

// All the headers of one packet; only those its opcode names (OpcodeInfo::Has) are meaningful.
struct PacketHeaders {
  Bth bth;
  Reth reth;
  Aeth aeth;
  AtomicEth atomic;
  AtomicAckEth atomic_ack;
  Deth deth;
  ImmDt immdt;
  Ieth ieth;
};

// Encoders write exactly the header's size at `p`; decoders read exactly that many bytes.
void EncodeBth(const Bth& h, uint8_t* p);
Bth DecodeBth(const uint8_t* p);
void EncodeReth(const Reth& h, uint8_t* p);
Reth DecodeReth(const uint8_t* p);
void EncodeAeth(const Aeth& h, uint8_t* p);
Aeth DecodeAeth(const uint8_t* p);
void EncodeAtomicEth(const AtomicEth& h, uint8_t* p);
AtomicEth DecodeAtomicEth(const uint8_t* p);
void EncodeAtomicAckEth(const AtomicAckEth& h, uint8_t* p);
AtomicAckEth DecodeAtomicAckEth(const uint8_t* p);
void EncodeDeth(const Deth& h, uint8_t* p);
Deth DecodeDeth(const uint8_t* p);

// Writes / reads the extension headers `info` lists, in order, starting right after the BTH
// (`p` points at the BTH).
void EncodeExtensions(const OpcodeInfo& info, const PacketHeaders& h, uint8_t* p);
void DecodeExtensions(const OpcodeInfo& info, const uint8_t* p, PacketHeaders* h);

}  // namespace softverbs::fabric::packet
