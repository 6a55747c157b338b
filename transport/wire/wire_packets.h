// Messages as RoCEv2 packets and back (IBA 9.2-9.3, annex A17): what the wire fabric sends for a
// Request, and the Request a received packet makes for the responder. The packet layouts
// themselves are fabric/packet's; this file maps them to the transport's events.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "fabric/packet/packet.h"
#include "transport/request.h"

namespace softverbs::transport {

// A Request built from a received packet; `piece` holds its payload (inside the datagram).
struct WireRequest {
  Request request;
  iovec piece{};
};

// The request `p` carries, if the wire fabric executes its kind: UD SEND_ONLY and
// SEND_ONLY_WITH_IMMEDIATE (IBA 9.6). False for any other packet.
bool RequestOfPacket(const fabric::packet::ParsedPacket& p, WireRequest* out);

// Builds the UD SEND_ONLY[_WITH_IMMEDIATE] packet of `r` (BTH, DETH, ImmDt, payload, ICRC for
// `flow`) into `out`; returns its size.
Result<size_t> BuildDatagram(const Request& r, uint32_t psn, const fabric::packet::IpUdpInfo& flow,
                             std::span<uint8_t> out);

// Room for any packet: a 4096-byte MTU, its headers and ICRC.
inline constexpr size_t kPacketSlot = 4096 + 128;

// The packets of an RC/UC SEND or RDMA WRITE `r`, cut by r.mtu (IBA 9.4: FIRST and MIDDLE carry
// exactly the MTU; ONLY/LAST the rest), PSNs from r.psn on: how many there are, and packets
// [first, first + lengths.size()) built into `arena` (packet k at k * kPacketSlot; a single packet
// may take a smaller buffer), their sizes in
// `lengths` (so a batch goes out in one system call).
uint64_t MessagePackets(const Request& r);
Status BuildMessagePackets(const Request& r, const fabric::packet::IpUdpInfo& flow, uint64_t first,
                           std::span<uint8_t> arena, std::span<size_t> lengths);
// The packets [first, first + n) of the same message built around their payload
// (packet::BuildGathered): headers and trailers in `wrap` (kWrapSlot bytes per packet), the
// payload where r.local holds it. Appends each packet's pieces to `pieces` and their count to
// `counts` (WireFabric::SendGathered), so a message's bytes are not copied before the kernel's.
inline constexpr size_t kWrapSlot = 64 + fabric::packet::kMaxTrailerBytes + 1;  // headers (<= 60 B), pad, ICRC
Status GatherMessagePackets(const Request& r, const fabric::packet::IpUdpInfo& flow, uint64_t first, size_t n,
                            std::span<uint8_t> wrap, std::vector<iovec>& pieces, std::vector<uint16_t>& counts);
// The same, one packet at a time: each built into `buffer` (kPacketSlot bytes) and handed to
// `emit`. The first error stops it.
Status BuildMessage(const Request& r, const fabric::packet::IpUdpInfo& flow, std::span<uint8_t> buffer,
                    const std::function<Status(std::span<const uint8_t>)>& emit);

// RC requests of one packet: RDMA READ request (RETH; it takes one PSN per response packet) and
// the atomics (AtomicETH).
Result<size_t> BuildReadRequest(const Request& r, const fabric::packet::IpUdpInfo& flow, std::span<uint8_t> out);
Result<size_t> BuildAtomic(const Request& r, const fabric::packet::IpUdpInfo& flow, std::span<uint8_t> out);

// The responder's packets (IBA 9.7.5): ACKNOWLEDGE with an AETH `syndrome` (IBA table 44:
// 0x1f an ACK without credits, as rxe sends; 0x20|timer an RNR NAK; 0x60..0x63 NAKs), ATOMIC
// ACKNOWLEDGE with the original value, and the READ response packets for `data` (AETH on the
// FIRST, LAST and ONLY ones), cut by `mtu`, PSNs from `psn`.
Result<size_t> BuildAck(uint32_t dest_qp, uint32_t psn, uint8_t syndrome, uint32_t msn,
                        const fabric::packet::IpUdpInfo& flow, std::span<uint8_t> out);
Result<size_t> BuildAtomicAck(uint32_t dest_qp, uint32_t psn, uint32_t msn, uint64_t original,
                              const fabric::packet::IpUdpInfo& flow, std::span<uint8_t> out);
Status BuildReadResponse(uint32_t dest_qp, uint32_t psn, uint32_t msn, std::span<const uint8_t> data, uint32_t mtu,
                         const fabric::packet::IpUdpInfo& flow, std::span<uint8_t> buffer,
                         const std::function<Status(std::span<const uint8_t>)>& emit);
// One READ response packet: `first` and `last` of its message choose the opcode (both: ONLY).
Result<size_t> BuildReadResponsePacket(uint32_t dest_qp, uint32_t psn, uint32_t msn, bool first, bool last,
                                       std::span<const uint8_t> piece, const fabric::packet::IpUdpInfo& flow,
                                       std::span<uint8_t> out);

// The same packet built around `piece` (as GatherMessagePackets): headers and trailer in
// `wrap` (kWrapSlot bytes), the piece where it lies; its pieces and count appended.
Status GatherReadResponsePacket(uint32_t dest_qp, uint32_t psn, uint32_t msn, bool first, bool last,
                                std::span<const uint8_t> piece, const fabric::packet::IpUdpInfo& flow,
                                std::span<uint8_t> wrap, std::vector<iovec>& pieces, std::vector<uint16_t>& counts);

// AETH syndromes (IBA 9.7.5.1 table 44).
namespace syndrome {
inline constexpr uint8_t kAck = 0x1f;  // ACK, credits "invalid" (rxe never uses credits)
inline constexpr uint8_t kRnr = 0x20;  // | the 5-bit RNR timer
inline constexpr uint8_t kPsnSequence = 0x60;
inline constexpr uint8_t kInvalidRequest = 0x61;
inline constexpr uint8_t kRemoteAccess = 0x62;
inline constexpr uint8_t kRemoteOp = 0x63;
}  // namespace syndrome

}  // namespace softverbs::transport
