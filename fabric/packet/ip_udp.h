// The IP and UDP headers a RoCEv2 packet travels in, as Linux writes them (RoCEv2 is IBA Annex
// A17: IPv4 or IPv6, then UDP to port 4791). The wire fabric only has UDP sockets, so it never
// sees these bytes; it needs them to compute the ICRC (which covers most of them) and to record a
// packet in a capture file. This file synthesizes them from the addresses and ports.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace softverbs::fabric::packet {

inline constexpr uint16_t kRoceV2Port = 4791;  // IANA "roce" (Annex A17)
inline constexpr size_t kIpv4HeaderBytes = 20;
inline constexpr size_t kIpv6HeaderBytes = 40;
inline constexpr size_t kUdpHeaderBytes = 8;
inline constexpr size_t kMaxIpUdpHeaderBytes = kIpv6HeaderBytes + kUdpHeaderBytes;

// One direction of a RoCEv2 flow. Addresses in network byte order: an IPv4 address is in the
// first 4 bytes of src/dst.
struct IpUdpInfo {
  bool ipv6 = false;
  std::array<uint8_t, 16> src{};
  std::array<uint8_t, 16> dst{};
  uint8_t traffic_class = 0;  // IPv4 TOS / IPv6 traffic class (masked out of the ICRC)
  uint8_t hop_limit = 64;     // IPv4 TTL / IPv6 hop limit (masked out of the ICRC)
  uint32_t flow_label = 0;    // IPv6 only, 20 bits (masked out of the ICRC)
  // IPv4 only, both inside the ICRC. A Linux UDP socket with IP_PMTUDISC_DO sends DF with ID 0;
  // the kernel's rxe sends DF with a per-packet ID (see the captures in the tests).
  uint16_t ip_id = 0;
  bool dont_fragment = true;
  uint16_t src_port = 0;
  uint16_t dst_port = kRoceV2Port;

  static IpUdpInfo V4(const uint8_t src4[4], const uint8_t dst4[4], uint16_t src_port);
  static IpUdpInfo V6(const uint8_t src16[16], const uint8_t dst16[16], uint16_t src_port);
  size_t ip_header_bytes() const { return ipv6 ? kIpv6HeaderBytes : kIpv4HeaderBytes; }
};

// Writes the IP header then the UDP header for a UDP payload of `udp_payload_bytes` (BTH through
// ICRC) into `out` (room for kMaxIpUdpHeaderBytes); returns the bytes written. With
// `checksums`, the IPv4 header checksum and the UDP checksum are computed over `udp_payload`
// (which must then hold the payload); without, both are 0 (rxe sends UDP checksum 0).
size_t WriteIpUdpHeaders(const IpUdpInfo& info, size_t udp_payload_bytes, bool checksums,
                         const uint8_t* udp_payload, uint8_t* out);

}  // namespace softverbs::fabric::packet
