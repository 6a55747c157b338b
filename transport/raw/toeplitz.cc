#include "transport/raw/toeplitz.h"

#include <cstring>

#include "transport/raw/esp.h"

namespace softverbs::transport::raw {

uint32_t ToeplitzHash(std::span<const uint8_t> key, std::span<const uint8_t> input) {
  auto key_bit = [&key](size_t bit) -> uint32_t {
    return bit / 8 < key.size() ? (key[bit / 8] >> (7 - bit % 8)) & 1u : 0u;
  };
  // The 32-bit window of the key that slides one bit per input bit.
  uint32_t window = 0;
  for (size_t b = 0; b < 32; ++b) window = window << 1 | key_bit(b);
  uint32_t hash = 0;
  size_t next = 32;
  for (uint8_t byte : input) {
    for (int b = 7; b >= 0; --b) {
      if ((byte >> b) & 1) hash ^= window;
      window = window << 1 | key_bit(next++);
    }
  }
  return hash;
}

namespace {

// IBV_RX_HASH_IPSEC_SPI: an ESP packet's SPI (4 bytes as on the wire) after its addresses, in
// the order of mlx5's hash field selector (addresses, L4 ports, SPI); an ESP packet has no ports,
// so the input stays within 36 bytes.
size_t EspSpiInput(std::span<const uint8_t> frame, const fabric::raw::FrameView& v, uint64_t fields, uint8_t* out) {
  if (!(fields & rx_hash::kIpsecSpi)) return 0;
  const size_t esp = EspOffset(frame, v);
  if (esp == 0) return 0;
  memcpy(out, frame.data() + esp, 4);
  return 4;
}

}  // namespace

size_t RssInput(const fabric::raw::FrameView& v, uint64_t fields, uint8_t out[36]) {
  size_t n = 0;
  auto put = [&](const void* p, size_t len) {
    memcpy(out + n, p, len);
    n += len;
  };
  if (v.ip_version == 4) {
    if (fields & rx_hash::kSrcIpv4) put(&v.ipv4_src_be, 4);
    if (fields & rx_hash::kDstIpv4) put(&v.ipv4_dst_be, 4);
  } else if (v.ip_version == 6) {
    if (fields & rx_hash::kSrcIpv6) put(v.ipv6_src, 16);
    if (fields & rx_hash::kDstIpv6) put(v.ipv6_dst, 16);
  }
  if (v.l4_offset == 0) return n;
  const bool tcp = v.ip_proto == fabric::raw::kIpProtoTcp, udp = v.ip_proto == fabric::raw::kIpProtoUdp;
  const uint8_t sport[2] = {static_cast<uint8_t>(v.src_port >> 8), static_cast<uint8_t>(v.src_port)};
  const uint8_t dport[2] = {static_cast<uint8_t>(v.dst_port >> 8), static_cast<uint8_t>(v.dst_port)};
  if ((tcp && (fields & rx_hash::kSrcPortTcp)) || (udp && (fields & rx_hash::kSrcPortUdp))) put(sport, 2);
  if ((tcp && (fields & rx_hash::kDstPortTcp)) || (udp && (fields & rx_hash::kDstPortUdp))) put(dport, 2);
  return n;
}

size_t RssFrameInput(std::span<const uint8_t> frame, const fabric::raw::FrameView& view, uint64_t fields,
                     uint8_t out[36]) {
  if ((fields & rx_hash::kInner) && view.has_vxlan) {
    fabric::raw::FrameView inner;
    const auto carried = frame.subspan(view.inner_offset);
    if (!fabric::raw::ParseFrame(carried, &inner)) return 0;
    const size_t n = RssInput(inner, fields, out);
    return n + EspSpiInput(carried, inner, fields, out + n);
  }
  const size_t n = RssInput(view, fields, out);
  return n + EspSpiInput(frame, view, fields, out + n);
}

}  // namespace softverbs::transport::raw
