#include "fabric/packet/ip_udp.h"

#include <cstring>

#include "base/big_endian.h"

namespace softverbs::fabric::packet {
namespace {

// RFC 1071 one's-complement sum, folded to 16 bits later.
uint32_t SumWords(uint32_t sum, const uint8_t* p, size_t len) {
  for (; len >= 2; p += 2, len -= 2) sum += uint32_t{p[0]} << 8 | p[1];
  if (len) sum += uint32_t{p[0]} << 8;
  return sum;
}

uint16_t Fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// The IPv4 header Linux's ip_build_and_send / ip_make_skb writes: no options, protocol UDP.
void WriteIpv4(const IpUdpInfo& info, size_t udp_bytes, bool checksum, uint8_t* h) {
  h[0] = 0x45;  // version 4, IHL 5
  h[1] = info.traffic_class;
  PutBe16(h + 2, static_cast<uint16_t>(kIpv4HeaderBytes + udp_bytes));
  PutBe16(h + 4, info.ip_id);
  PutBe16(h + 6, info.dont_fragment ? 0x4000 : 0);
  h[8] = info.hop_limit;
  h[9] = 17;  // IPPROTO_UDP
  PutBe16(h + 10, 0);
  memcpy(h + 12, info.src.data(), 4);
  memcpy(h + 16, info.dst.data(), 4);
  if (checksum) PutBe16(h + 10, Fold(SumWords(0, h, kIpv4HeaderBytes)));
}

void WriteIpv6(const IpUdpInfo& info, size_t udp_bytes, uint8_t* h) {
  uint32_t first = 6u << 28 | uint32_t{info.traffic_class} << 20 | (info.flow_label & 0xfffff);
  PutBe16(h, static_cast<uint16_t>(first >> 16));
  PutBe16(h + 2, static_cast<uint16_t>(first));
  PutBe16(h + 4, static_cast<uint16_t>(udp_bytes));  // payload length
  h[6] = 17;                                          // next header: UDP
  h[7] = info.hop_limit;
  memcpy(h + 8, info.src.data(), 16);
  memcpy(h + 24, info.dst.data(), 16);
}

// RFC 768 / RFC 8200 8.1: the UDP checksum covers a pseudo header of the addresses, the protocol
// and the UDP length. A computed 0 is sent as 0xffff.
uint16_t UdpChecksum(const IpUdpInfo& info, const uint8_t* udp, const uint8_t* payload,
                     size_t udp_bytes) {
  size_t addr_bytes = info.ipv6 ? 16 : 4;
  uint32_t sum = SumWords(0, info.src.data(), addr_bytes);
  sum = SumWords(sum, info.dst.data(), addr_bytes);
  sum += 17 + static_cast<uint32_t>(udp_bytes);
  sum = SumWords(sum, udp, kUdpHeaderBytes);
  sum = SumWords(sum, payload, udp_bytes - kUdpHeaderBytes);
  uint16_t c = Fold(sum);
  return c == 0 ? 0xffff : c;
}

}  // namespace

IpUdpInfo IpUdpInfo::V4(const uint8_t src4[4], const uint8_t dst4[4], uint16_t src_port) {
  IpUdpInfo info;
  memcpy(info.src.data(), src4, 4);
  memcpy(info.dst.data(), dst4, 4);
  info.src_port = src_port;
  return info;
}

IpUdpInfo IpUdpInfo::V6(const uint8_t src16[16], const uint8_t dst16[16], uint16_t src_port) {
  IpUdpInfo info;
  info.ipv6 = true;
  memcpy(info.src.data(), src16, 16);
  memcpy(info.dst.data(), dst16, 16);
  info.src_port = src_port;
  return info;
}

size_t WriteIpUdpHeaders(const IpUdpInfo& info, size_t udp_payload_bytes, bool checksums,
                         const uint8_t* udp_payload, uint8_t* out) {
  size_t udp_bytes = kUdpHeaderBytes + udp_payload_bytes;
  if (info.ipv6)
    WriteIpv6(info, udp_bytes, out);
  else
    WriteIpv4(info, udp_bytes, checksums, out);
  uint8_t* udp = out + info.ip_header_bytes();
  PutBe16(udp, info.src_port);
  PutBe16(udp + 2, info.dst_port);
  PutBe16(udp + 4, static_cast<uint16_t>(udp_bytes));
  PutBe16(udp + 6, 0);
  if (checksums) PutBe16(udp + 6, UdpChecksum(info, udp, udp_payload, udp_bytes));
  return info.ip_header_bytes() + kUdpHeaderBytes;
}

}  // namespace softverbs::fabric::packet
