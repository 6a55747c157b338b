// Matching a frame's headers against a rule's specs: a bit counts where the mask has it set
// (ibv_create_flow(3)). A spec of a layer also requires that layer: an IPV4 spec matches IPv4
// packets only, a TCP spec TCP segments only -- as a NIC's parser, which matches headers it found.
#include <cstring>

#include "transport/raw/esp.h"
#include "transport/raw/flow_rule.h"

namespace softverbs::transport::raw {
namespace {

template <typename T>
bool Eq(T value, T want, T mask) {
  return ((value ^ want) & mask) == 0;
}

bool BytesEq(const uint8_t* value, const uint8_t* want, const uint8_t* mask, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if ((value[i] ^ want[i]) & mask[i]) return false;
  return true;
}

bool MatchEth(const Masked<EthFields>& m, const fabric::raw::FrameView& v) {
  if (!m.present) return true;
  const EthFields &w = m.val, &k = m.mask;
  // A VLAN match needs a tagged frame (mlx5 sets cvlan_tag when the mask is not zero).
  if (k.vlan_tag != 0 && !v.has_vlan) return false;
  return BytesEq(v.dst_mac, w.dst_mac, k.dst_mac, 6) && BytesEq(v.src_mac, w.src_mac, k.src_mac, 6) &&
         Eq<uint16_t>(v.ether_type, w.ether_type, k.ether_type) && Eq<uint16_t>(v.vlan_tci, w.vlan_tag, k.vlan_tag);
}

bool MatchIpv4(const Masked<Ipv4Fields>& m, const fabric::raw::FrameView& v) {
  if (!m.present) return true;
  if (v.ip_version != 4) return false;
  const Ipv4Fields &w = m.val, &k = m.mask;
  return Eq(v.ipv4_src_be, w.src_be, k.src_be) && Eq(v.ipv4_dst_be, w.dst_be, k.dst_be) &&
         Eq<uint8_t>(v.ip_proto, w.proto, k.proto) && Eq<uint8_t>(v.tos, w.tos, k.tos) &&
         Eq<uint8_t>(v.ttl, w.ttl, k.ttl) && Eq<uint8_t>(v.ipv4_flags, w.flags, k.flags);
}

bool MatchIpv6(const Masked<Ipv6Fields>& m, const fabric::raw::FrameView& v) {
  if (!m.present) return true;
  if (v.ip_version != 6) return false;
  const Ipv6Fields &w = m.val, &k = m.mask;
  return BytesEq(v.ipv6_src, w.src, k.src, 16) && BytesEq(v.ipv6_dst, w.dst, k.dst, 16) &&
         Eq(v.ipv6_flow_label, w.flow_label, k.flow_label) && Eq<uint8_t>(v.ip_proto, w.next_hdr, k.next_hdr) &&
         Eq<uint8_t>(v.tos, w.traffic_class, k.traffic_class) && Eq<uint8_t>(v.ttl, w.hop_limit, k.hop_limit);
}

bool MatchL4(const Masked<L4Fields>& m, uint8_t proto, const fabric::raw::FrameView& v) {
  if (!m.present) return true;
  if (v.ip_version == 0 || v.ip_proto != proto || v.l4_offset == 0) return false;
  return Eq(v.src_port, m.val.src_port, m.mask.src_port) && Eq(v.dst_port, m.val.dst_port, m.mask.dst_port);
}

bool MatchStack(const HeaderMatch& h, const fabric::raw::FrameView& v) {
  return MatchEth(h.eth, v) && MatchIpv4(h.ipv4, v) && MatchIpv6(h.ipv6, v) &&
         MatchL4(h.tcp, fabric::raw::kIpProtoTcp, v) && MatchL4(h.udp, fabric::raw::kIpProtoUdp, v);
}

bool HasInner(const HeaderMatch& h) {
  return h.eth.present || h.ipv4.present || h.ipv6.present || h.tcp.present || h.udp.present;
}

bool MatchEsp(const Masked<uint32_t>& m, std::span<const uint8_t> frame, const fabric::raw::FrameView& v) {
  if (!m.present) return true;
  const size_t esp = EspOffset(frame, v);
  if (esp == 0) return false;
  const uint32_t spi = uint32_t(frame[esp]) << 24 | uint32_t(frame[esp + 1]) << 16 | uint32_t(frame[esp + 2]) << 8 | frame[esp + 3];
  return Eq(spi, m.val, m.mask);
}

}  // namespace

bool Matches(const FlowRule& rule, std::span<const uint8_t> frame, const fabric::raw::FrameView& view) {
  if (!MatchStack(rule.outer, view) || !MatchEsp(rule.esp_spi, frame, view)) return false;
  if (!rule.vxlan_vni.present && !HasInner(rule.inner)) return true;
  if (!view.has_vxlan) return false;
  if (rule.vxlan_vni.present && !Eq(view.vxlan_vni, rule.vxlan_vni.val, rule.vxlan_vni.mask)) return false;
  if (!HasInner(rule.inner)) return true;
  fabric::raw::FrameView inner;
  if (!fabric::raw::ParseFrame(frame.subspan(view.inner_offset), &inner)) return false;
  return MatchStack(rule.inner, inner);
}

}  // namespace softverbs::transport::raw
