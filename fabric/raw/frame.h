// Ethernet frames as bytes: the headers a NIC's parser reads (802.1Q tags, IPv4, IPv6, TCP, UDP,
// VXLAN), Internet checksums (RFC 791, 793, 768, 8200 section 8.1) and the 802.3 FCS. Pure: no
// sockets, no verbs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace softverbs::fabric::raw {

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeQinQ = 0x88a8;
inline constexpr uint8_t kIpProtoTcp = 6;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint16_t kVxlanPort = 4789;  // RFC 7348

// The parsed headers of one frame. Multi-byte values are in host order unless named _be.
struct FrameView {
  uint8_t dst_mac[6] = {};
  uint8_t src_mac[6] = {};
  bool has_vlan = false;     // an outer 802.1Q / 802.1ad tag
  uint16_t vlan_tci = 0;     // its TCI (PCP, DEI, VID)
  uint16_t ether_type = 0;   // the type after the last tag (ibv_create_flow(3) note 3)
  size_t l3_offset = 0;      // first byte after the Ethernet header and tags
  int ip_version = 0;        // 4, 6, or 0 (not IP, or truncated)
  uint32_t ipv4_src_be = 0, ipv4_dst_be = 0;
  uint8_t ipv6_src[16] = {}, ipv6_dst[16] = {};
  uint32_t ipv6_flow_label = 0;
  uint8_t ip_proto = 0;      // IPv4 protocol / IPv6 next header (after no extension headers)
  uint8_t tos = 0;           // IPv4 TOS / IPv6 traffic class
  uint8_t ttl = 0;           // IPv4 TTL / IPv6 hop limit
  uint8_t ipv4_flags = 0;    // DF, MF (3 bits)
  bool fragment = false;     // an IPv4 fragment: its L4 header is not parsed
  size_t l4_offset = 0;      // the TCP/UDP header (0: none)
  size_t ip_end = 0;         // end of the IP datagram (its total length), <= frame size
  uint16_t src_port = 0, dst_port = 0;
  bool has_vxlan = false;    // UDP to 4789 carrying a VXLAN header
  uint32_t vxlan_vni = 0;
  size_t inner_offset = 0;   // the inner Ethernet frame of a VXLAN packet
};

// Parses what it can: a short or unknown frame still fills the fields it reached. False only
// when the Ethernet header itself (14 bytes) is missing.
bool ParseFrame(std::span<const uint8_t> frame, FrameView* view);

// RFC 1071 one's-complement sum (not inverted), continuing from `sum`.
uint32_t OnesSum(const uint8_t* data, size_t len, uint32_t sum = 0);
uint16_t FoldChecksum(uint32_t sum);

// IBV_SEND_IP_CSUM: computes the IPv4 header checksum and the TCP or UDP checksum (IPv4 or
// IPv6 pseudo header) in place. Frames that are neither are left as they are.
void FillChecksums(std::span<uint8_t> frame);

// The receive side's verdict (IBV_WC_IP_CSUM_OK): an IPv4 packet whose header checksum and
// TCP/UDP checksum (a UDP checksum of 0 means "none" in IPv4) are both correct.
bool ChecksumsOk(std::span<const uint8_t> frame, const FrameView& view);

// The 802.3 frame check sequence of `frame` as it appears on the wire (4 bytes, CRC-32
// transmitted least significant byte first).
void EthernetFcs(std::span<const uint8_t> frame, uint8_t out[4]);

}  // namespace softverbs::fabric::raw
