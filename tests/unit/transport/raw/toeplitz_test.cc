#include "transport/raw/toeplitz.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace softverbs::transport::raw {
namespace {

// Microsoft's RSS verification suite ("Verifying the RSS Hash Calculation"): its key, and for
// each (destination, source) pair the IPv4-only and IPv4-with-TCP hashes.
constexpr uint8_t kKey[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
                              0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
                              0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

struct RssVector {
  const char* dst;
  uint16_t dport;
  const char* src;
  uint16_t sport;
  uint32_t ip, tcp;
};
constexpr RssVector kV4[] = {
    {"161.142.100.80", 1766, "66.9.149.187", 2794, 0x323e8fc2, 0x51ccc178},
    {"65.69.140.83", 4739, "199.92.111.2", 14230, 0xd718262a, 0xc626b0ea},
    {"12.22.207.184", 38024, "24.19.198.95", 12898, 0xd2d0a5de, 0x5c2b394a},
    {"209.142.163.6", 2217, "38.27.205.30", 48228, 0x82989176, 0xafc7327f},
    {"202.188.127.2", 1303, "153.39.163.191", 44251, 0x5d1809c5, 0x10e828a2},
};

constexpr RssVector kV6[] = {
    {"3ffe:2501:200:3::1", 1766, "3ffe:2501:200:1fff::7", 2794, 0x2cc18cd5, 0x40207d3d},
    {"ff02::1", 4739, "3ffe:501:8::260:97ff:fe40:efab", 14230, 0x0f0c461c, 0xdde51bbf},
    {"fe80::200:f8ff:fe21:67cf", 38024, "3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251, 0x4b61e985, 0x02d1feef},
};

TEST(ToeplitzTest, MicrosoftIpv4Vectors) {
  for (const RssVector& v : kV4) {
    fabric::raw::FrameView f;
    f.ip_version = 4;
    f.ip_proto = fabric::raw::kIpProtoTcp;
    inet_pton(AF_INET, v.src, &f.ipv4_src_be);
    inet_pton(AF_INET, v.dst, &f.ipv4_dst_be);
    f.l4_offset = 34;
    f.src_port = v.sport, f.dst_port = v.dport;
    uint8_t in[36];
    size_t n = RssInput(f, rx_hash::kSrcIpv4 | rx_hash::kDstIpv4, in);
    EXPECT_EQ(ToeplitzHash(kKey, {in, n}), v.ip) << v.dst;
    n = RssInput(f, rx_hash::kSrcIpv4 | rx_hash::kDstIpv4 | rx_hash::kSrcPortTcp | rx_hash::kDstPortTcp, in);
    EXPECT_EQ(ToeplitzHash(kKey, {in, n}), v.tcp) << v.dst;
    // UDP port bits do not select TCP ports.
    n = RssInput(f, rx_hash::kSrcIpv4 | rx_hash::kDstIpv4 | rx_hash::kSrcPortUdp, in);
    EXPECT_EQ(ToeplitzHash(kKey, {in, n}), v.ip);
  }
}

TEST(ToeplitzTest, MicrosoftIpv6Vectors) {
  for (const RssVector& v : kV6) {
    fabric::raw::FrameView f;
    f.ip_version = 6;
    f.ip_proto = fabric::raw::kIpProtoTcp;
    inet_pton(AF_INET6, v.src, f.ipv6_src);
    inet_pton(AF_INET6, v.dst, f.ipv6_dst);
    f.l4_offset = 54;
    f.src_port = v.sport, f.dst_port = v.dport;
    uint8_t in[36];
    size_t n = RssInput(f, rx_hash::kSrcIpv6 | rx_hash::kDstIpv6, in);
    EXPECT_EQ(ToeplitzHash(kKey, {in, n}), v.ip) << v.dst;
    n = RssInput(f, rx_hash::kSrcIpv6 | rx_hash::kDstIpv6 | rx_hash::kSrcPortTcp | rx_hash::kDstPortTcp, in);
    EXPECT_EQ(ToeplitzHash(kKey, {in, n}), v.tcp) << v.dst;
  }
}

// Frames for IBV_RX_HASH_INNER: an IPv4 or IPv6 packet with a TCP header (ports only matter).
void ToeplitzTestPut16(std::vector<uint8_t>* f, uint16_t v) {
  f->push_back(static_cast<uint8_t>(v >> 8));
  f->push_back(static_cast<uint8_t>(v));
}

std::vector<uint8_t> ToeplitzTestIpFrame(int version, const char* src, const char* dst, uint8_t proto,
                                         uint16_t sport, uint16_t dport, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> f = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
  const size_t l4_len = 8 + payload.size() + (proto == fabric::raw::kIpProtoTcp ? 12 : 0);
  if (version == 4) {
    ToeplitzTestPut16(&f, 0x0800);
    uint8_t ip[20] = {0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto};
    ip[2] = static_cast<uint8_t>((20 + l4_len) >> 8), ip[3] = static_cast<uint8_t>(20 + l4_len);
    inet_pton(AF_INET, src, ip + 12);
    inet_pton(AF_INET, dst, ip + 16);
    f.insert(f.end(), ip, ip + 20);
  } else {
    ToeplitzTestPut16(&f, 0x86dd);
    uint8_t ip[40] = {0x60, 0, 0, 0, 0, 0, proto, 64};
    ip[4] = static_cast<uint8_t>(l4_len >> 8), ip[5] = static_cast<uint8_t>(l4_len);
    inet_pton(AF_INET6, src, ip + 8);
    inet_pton(AF_INET6, dst, ip + 24);
    f.insert(f.end(), ip, ip + 40);
  }
  ToeplitzTestPut16(&f, sport);
  ToeplitzTestPut16(&f, dport);
  if (proto == fabric::raw::kIpProtoTcp) {
    const uint8_t tcp_rest[16] = {0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0};
    f.insert(f.end(), tcp_rest, tcp_rest + 16);
  } else {
    ToeplitzTestPut16(&f, static_cast<uint16_t>(l4_len));
    ToeplitzTestPut16(&f, 0);
  }
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

// The outer packet: UDP to VXLAN's port 4789 carrying `inner` after the 8-byte VXLAN header.
std::vector<uint8_t> ToeplitzTestVxlan(const char* src, const char* dst, const std::vector<uint8_t>& inner) {
  std::vector<uint8_t> vxlan = {0x08, 0, 0, 0, 0, 0x12, 0x34, 0};
  vxlan.insert(vxlan.end(), inner.begin(), inner.end());
  return ToeplitzTestIpFrame(4, src, dst, fabric::raw::kIpProtoUdp, 50000, 4789, vxlan);
}

uint32_t ToeplitzTestFrameHash(const std::vector<uint8_t>& frame, uint64_t fields) {
  fabric::raw::FrameView v;
  EXPECT_TRUE(fabric::raw::ParseFrame(frame, &v));
  uint8_t in[36];
  const size_t n = RssFrameInput(frame, v, fields, in);
  return ToeplitzHash(kKey, {in, n});
}

TEST(ToeplitzTest, InnerHashTakesTheVxlanPacketsHeaders) {
  using namespace rx_hash;
  const uint64_t ip4 = kSrcIpv4 | kDstIpv4, tcp = kSrcPortTcp | kDstPortTcp;
  for (size_t i = 0; i < std::size(kV4); ++i) {
    const RssVector& in = kV4[i];
    const RssVector& out = kV4[(i + 1) % std::size(kV4)];  // the outer addresses: another known vector
    const auto frame = ToeplitzTestVxlan(
        out.src, out.dst, ToeplitzTestIpFrame(4, in.src, in.dst, fabric::raw::kIpProtoTcp, in.sport, in.dport, {1, 2}));
    EXPECT_EQ(ToeplitzTestFrameHash(frame, kInner | ip4 | tcp), in.tcp) << in.dst;
    EXPECT_EQ(ToeplitzTestFrameHash(frame, kInner | ip4), in.ip) << in.dst;
    // Without INNER the outer addresses are hashed (and the outer UDP ports are not TCP ports).
    EXPECT_EQ(ToeplitzTestFrameHash(frame, ip4 | tcp), out.ip) << out.dst;
  }
  for (const RssVector& in : kV6) {
    const auto frame = ToeplitzTestVxlan(
        "10.0.0.1", "10.0.0.2",
        ToeplitzTestIpFrame(6, in.src, in.dst, fabric::raw::kIpProtoTcp, in.sport, in.dport, {}));
    EXPECT_EQ(ToeplitzTestFrameHash(frame, kInner | kSrcIpv6 | kDstIpv6 | tcp), in.tcp) << in.dst;
    // The outer packet is IPv4: IPv6 fields select nothing there.
    EXPECT_EQ(ToeplitzTestFrameHash(frame, kSrcIpv6 | kDstIpv6 | tcp), 0u);
  }
}

TEST(ToeplitzTest, InnerHashOfAFrameWithoutVxlanTakesItsOwnHeaders) {
  using namespace rx_hash;
  const RssVector& v = kV4[0];
  const auto plain = ToeplitzTestIpFrame(4, v.src, v.dst, fabric::raw::kIpProtoTcp, v.sport, v.dport, {});
  EXPECT_EQ(ToeplitzTestFrameHash(plain, kInner | kSrcIpv4 | kDstIpv4 | kSrcPortTcp | kDstPortTcp), v.tcp);
}

}  // namespace
}  // namespace softverbs::transport::raw
