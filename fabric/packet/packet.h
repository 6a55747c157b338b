// One RoCEv2 packet, the UDP payload of a datagram to port 4791: BTH, the extension headers its
// opcode names, payload, 0-3 pad bytes, ICRC (IBA 9.2-9.3, Annex A17).
//
// Parse() is the only way bytes from the network become headers: it refuses everything a hostile
// or corrupt datagram can break, naming the rule, and never reads outside the span it is given.
// Build() is its inverse, byte for byte (tests check that against captures of the kernel's rxe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/status.h"
#include "fabric/packet/headers.h"
#include "fabric/packet/ip_udp.h"
#include "fabric/packet/opcode.h"

namespace softverbs::fabric::packet {

struct ParsedPacket {
  const OpcodeInfo* info = nullptr;  // never null in a parsed packet
  PacketHeaders hdr;                 // only the headers info->Has() are filled in
  std::span<const uint8_t> payload;  // inside the parsed span; pad excluded
  uint32_t icrc = 0;                 // as carried (checked only if Parse was given the flow)
};

// Parses a UDP payload. With `flow` (the datagram's addresses and ports), also checks the ICRC.
// Refusals: EOPNOTSUPP for an opcode softverbs does not know, EBADMSG for an ICRC mismatch,
// EINVAL for every other rule (length, TVer, pad, payload on an opcode that carries none). The
// caller logs the refusal with the peer's address; rxe and hardware drop such packets silently.
Result<ParsedPacket> Parse(std::span<const uint8_t> udp_payload, const IpUdpInfo* flow = nullptr);

// One piece of payload to gather (like struct iovec).
struct ConstBuffer {
  const void* data = nullptr;
  size_t size = 0;
};

// The UDP payload size of a packet of opcode `info` with `payload_bytes` of payload.
inline size_t WireBytes(const OpcodeInfo& info, size_t payload_bytes) {
  return info.header_bytes + payload_bytes + ((0 - payload_bytes) & 3) + kIcrcBytes;
}

// A packet built around its payload (BuildGathered): its UDP payload is `header_bytes` of
// headers, the payload pieces as given, then `trailer_bytes` of pad and ICRC.
struct GatheredPacket {
  size_t header_bytes = 0;
  size_t payload_bytes = 0;
  size_t trailer_bytes = 0;
  size_t bytes() const { return header_bytes + payload_bytes + trailer_bytes; }
};
inline constexpr size_t kMaxTrailerBytes = 3 + kIcrcBytes;  // pad and ICRC

// What Build() writes, without copying the payload: BTH and extension headers into `head`, pad
// and ICRC into `trailer`; the ICRC is computed over the payload where it lies. A sender hands
// [head, payload pieces, trailer] to the kernel as one datagram (sendmsg's iovecs), so the
// application's bytes are read twice (ICRC, the kernel's copy) and copied once. Same refusals as
// Build (a `head` smaller than the headers instead of `out`).
Result<GatheredPacket> BuildGathered(const PacketHeaders& h, std::span<const ConstBuffer> payload, const IpUdpInfo& ip,
                                     std::span<uint8_t> head, std::span<uint8_t, kMaxTrailerBytes> trailer);

// Writes BTH, extension headers, the gathered payload, the pad and the ICRC (for the flow `ip`)
// into `out`; returns the bytes written (WireBytes). The BTH pad count is computed here, not
// taken from `h`. Refuses (EINVAL) unknown opcodes, payload on an opcode that carries none,
// fields wider than the wire's, TVer != 0, a packet larger than a UDP datagram, and an `out`
// too small.
Result<size_t> Build(const PacketHeaders& h, std::span<const ConstBuffer> payload,
                     const IpUdpInfo& ip, std::span<uint8_t> out);

}  // namespace softverbs::fabric::packet
