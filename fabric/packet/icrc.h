// The RoCEv2 Invariant CRC (IBA Annex A17), computed exactly as the kernel's rxe does
// (drivers/infiniband/sw/rxe/rxe_icrc.c, rxe_icrc_hdr()):
//
//   crc32( 8 x 0xff                  -- stands for the masked IB LRH
//        | IP header with the fields routers may change set to all ones
//            IPv4: TOS, TTL, header checksum;  IPv6: traffic class, flow label, hop limit
//        | UDP header with its checksum set to 0xffff
//        | BTH with byte 4 (FECN, BECN, resv6 = "resv8a") set to 0xff
//        | extension headers, payload, pad )
//
// with zlib's CRC-32 (initial ~0, final inversion), stored after the pad little-endian.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "fabric/packet/ip_udp.h"

namespace softverbs::fabric::packet {

// The ICRC of the RoCEv2 packet whose UDP payload, without its trailing 4 ICRC bytes, is
// `udp_payload_without_icrc` (at least the 12 BTH bytes), sent in the flow `ip`. The UDP length
// and IP lengths are derived from the payload size plus the ICRC.
uint32_t ComputeIcrc(const IpUdpInfo& ip, std::span<const uint8_t> udp_payload_without_icrc);

// The same ICRC computed over a packet in pieces (a sender's headers, then its payload where the
// application's memory holds it, then the pad), so the payload is read once and never copied:
// `head` holds at least the BTH, and `udp_payload_without_icrc` counts head and every piece Add()
// will be given. Finish() is 0 for a head shorter than the BTH, as ComputeIcrc.
class IcrcBuilder {
 public:
  IcrcBuilder(const IpUdpInfo& ip, std::span<const uint8_t> head, size_t udp_payload_without_icrc);
  void Add(std::span<const uint8_t> bytes);
  uint32_t Finish() const { return valid_ ? ~crc_ : 0; }

 private:
  uint32_t crc_ = 0;
  bool valid_ = false;
};

// Checks the trailing ICRC of a whole UDP payload (BTH ... ICRC). EBADMSG names the mismatch.
Status CheckIcrc(const IpUdpInfo& ip, std::span<const uint8_t> udp_payload);

// Checks the ICRC of an IPv4 packet whose IP ID the receiver cannot see (a UDP socket does not
// show it, and the kernel's rxe sends a per-packet ID that the ICRC covers): returns the one ID
// with which the ICRC verifies (`ip.ip_id` is ignored), or EBADMSG if none does. The CRC is linear,
// so this solves for the 16 ID bits instead of trying them; the check keeps 16 of its 32 bits of
// strength (a corrupt packet passes with probability about 2^-16).
Result<uint16_t> RecoverIpv4Id(const IpUdpInfo& ip, std::span<const uint8_t> udp_payload);

// What to XOR into the ICRC of an IPv4 packet computed with IP ID 0 to make it the ICRC of the
// same packet sent with ID `id`; `udp_payload_bytes` counts BTH ... ICRC. For UDP GSO sends, whose
// segments the kernel numbers 0, 1, 2... (net/ipv4/af_inet.c inet_gso_segment).
uint32_t Ipv4IdIcrcEffect(uint16_t id, size_t udp_payload_bytes);

// Writes `icrc` in its wire byte order (little-endian, rxe_icrc.c: "it's a __le32").
inline void StoreIcrc(uint32_t icrc, uint8_t* out) {
  out[0] = static_cast<uint8_t>(icrc);
  out[1] = static_cast<uint8_t>(icrc >> 8);
  out[2] = static_cast<uint8_t>(icrc >> 16);
  out[3] = static_cast<uint8_t>(icrc >> 24);
}
inline uint32_t LoadIcrc(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

}  // namespace softverbs::fabric::packet
