#include "fabric/raw/frame.h"

#include <cstring>

#include "base/big_endian.h"
#include "fabric/packet/crc32.h"

namespace softverbs::fabric::raw {
namespace {

void ParseL4(std::span<const uint8_t> f, FrameView* v) {
  if (v->fragment) return;
  const size_t need = v->ip_proto == kIpProtoTcp ? 20 : v->ip_proto == kIpProtoUdp ? 8 : 0;
  if (need == 0 || v->l4_offset + need > v->ip_end) {
    v->l4_offset = 0;
    return;
  }
  const uint8_t* l4 = f.data() + v->l4_offset;
  v->src_port = Be16(l4);
  v->dst_port = Be16(l4 + 2);
  // RFC 7348 section 5: a VXLAN header (flags 0x08 = valid VNI) follows the UDP header.
  if (v->ip_proto == kIpProtoUdp && v->dst_port == kVxlanPort && v->l4_offset + 8 + 8 + 14 <= v->ip_end &&
      (l4[8] & 0x08)) {
    v->has_vxlan = true;
    v->vxlan_vni = static_cast<uint32_t>(l4[12]) << 16 | l4[13] << 8 | l4[14];
    v->inner_offset = v->l4_offset + 16;
  }
}

void ParseIpv4(std::span<const uint8_t> f, FrameView* v) {
  const uint8_t* ip = f.data() + v->l3_offset;
  const size_t ihl = (ip[0] & 0x0f) * 4u;
  const size_t total = Be16(ip + 2);
  if ((ip[0] >> 4) != 4 || ihl < 20 || v->l3_offset + ihl > f.size()) return;
  v->ip_version = 4;
  v->tos = ip[1];
  v->ipv4_flags = ip[6] >> 5;
  v->fragment = (Be16(ip + 6) & 0x1fff) != 0;  // not the first fragment
  v->ttl = ip[8];
  v->ip_proto = ip[9];
  memcpy(&v->ipv4_src_be, ip + 12, 4);
  memcpy(&v->ipv4_dst_be, ip + 16, 4);
  v->ip_end = total >= ihl && v->l3_offset + total <= f.size() ? v->l3_offset + total : f.size();
  v->l4_offset = v->l3_offset + ihl;
  ParseL4(f, v);
}

void ParseIpv6(std::span<const uint8_t> f, FrameView* v) {
  const uint8_t* ip = f.data() + v->l3_offset;
  if ((ip[0] >> 4) != 6) return;
  v->ip_version = 6;
  v->tos = static_cast<uint8_t>((Be16(ip) >> 4) & 0xff);
  v->ipv6_flow_label = (static_cast<uint32_t>(ip[1] & 0x0f) << 16) | Be16(ip + 2);
  v->ip_proto = ip[6];
  v->ttl = ip[7];
  memcpy(v->ipv6_src, ip + 8, 16);
  memcpy(v->ipv6_dst, ip + 24, 16);
  const size_t end = v->l3_offset + 40 + Be16(ip + 4);
  v->ip_end = end <= f.size() ? end : f.size();
  v->l4_offset = v->l3_offset + 40;
  ParseL4(f, v);
}

}  // namespace

bool ParseFrame(std::span<const uint8_t> f, FrameView* v) {
  *v = FrameView{};
  if (f.size() < 14) return false;
  memcpy(v->dst_mac, f.data(), 6);
  memcpy(v->src_mac, f.data() + 6, 6);
  size_t at = 12;
  uint16_t type = Be16(f.data() + at);
  while ((type == kEtherTypeVlan || type == kEtherTypeQinQ) && at + 6 <= f.size()) {
    if (!v->has_vlan) {
      v->has_vlan = true;
      v->vlan_tci = Be16(f.data() + at + 2);
    }
    at += 4;
    type = Be16(f.data() + at);
  }
  v->ether_type = type;
  v->l3_offset = at + 2;
  if (type == kEtherTypeIpv4 && v->l3_offset + 20 <= f.size()) ParseIpv4(f, v);
  if (type == kEtherTypeIpv6 && v->l3_offset + 40 <= f.size()) ParseIpv6(f, v);
  if (v->ip_version == 0) v->ip_end = f.size();
  return true;
}

uint32_t OnesSum(const uint8_t* data, size_t len, uint32_t sum) {
  uint64_t s = sum;
  size_t i = 0;
  for (; i + 1 < len; i += 2) s += Be16(data + i);
  if (i < len) s += static_cast<uint32_t>(data[i]) << 8;
  while (s >> 32) s = (s & 0xffffffff) + (s >> 32);
  return static_cast<uint32_t>(s);
}

uint16_t FoldChecksum(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

namespace {

// The TCP/UDP pseudo header sum (RFC 793 section 3.1, RFC 8200 section 8.1).
uint32_t PseudoSum(std::span<const uint8_t> f, const FrameView& v) {
  const uint8_t* ip = f.data() + v.l3_offset;
  const size_t l4_len = v.ip_end - v.l4_offset;
  uint32_t s = 0;
  if (v.ip_version == 4) {
    s = OnesSum(ip + 12, 8);
  } else {
    s = OnesSum(ip + 8, 32);
  }
  s += v.ip_proto;
  s += static_cast<uint32_t>(l4_len & 0xffff) + static_cast<uint32_t>(l4_len >> 16);
  return s;
}

size_t L4ChecksumOffset(const FrameView& v) { return v.ip_proto == kIpProtoTcp ? 16 : 6; }

}  // namespace

void FillChecksums(std::span<uint8_t> f) {
  FrameView v;
  if (!ParseFrame(f, &v) || v.ip_version == 0) return;
  if (v.ip_version == 4) {
    uint8_t* ip = f.data() + v.l3_offset;
    const size_t ihl = (ip[0] & 0x0f) * 4u;
    PutBe16(ip + 10, 0);
    PutBe16(ip + 10, static_cast<uint16_t>(~FoldChecksum(OnesSum(ip, ihl))));
  }
  if (v.l4_offset == 0) return;
  uint8_t* l4 = f.data() + v.l4_offset;
  uint8_t* field = l4 + L4ChecksumOffset(v);
  PutBe16(field, 0);
  uint16_t c = static_cast<uint16_t>(~FoldChecksum(OnesSum(l4, v.ip_end - v.l4_offset, PseudoSum(f, v))));
  if (c == 0 && v.ip_proto == kIpProtoUdp) c = 0xffff;  // RFC 768: a computed 0 is sent as all ones
  PutBe16(field, c);
}

bool ChecksumsOk(std::span<const uint8_t> f, const FrameView& v) {
  if (v.ip_version != 4) return false;
  const uint8_t* ip = f.data() + v.l3_offset;
  const size_t ihl = (ip[0] & 0x0f) * 4u;
  if (FoldChecksum(OnesSum(ip, ihl)) != 0xffff) return false;
  if (v.l4_offset == 0) return false;
  const uint8_t* l4 = f.data() + v.l4_offset;
  if (v.ip_proto == kIpProtoUdp && Be16(l4 + 6) == 0) return true;  // IPv4 UDP without checksum
  return FoldChecksum(OnesSum(l4, v.ip_end - v.l4_offset, PseudoSum(f, v))) == 0xffff;
}

void EthernetFcs(std::span<const uint8_t> frame, uint8_t out[4]) {
  const uint32_t crc = packet::Crc32(frame.data(), frame.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(crc >> (8 * i));
}

}  // namespace softverbs::fabric::raw
