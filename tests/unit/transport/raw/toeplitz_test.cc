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

struct V4 {
  const char* dst;
  uint16_t dport;
  const char* src;
  uint16_t sport;
  uint32_t ip, tcp;
};
constexpr V4 kV4[] = {
    {"161.142.100.80", 1766, "66.9.149.187", 2794, 0x323e8fc2, 0x51ccc178},
    {"65.69.140.83", 4739, "199.92.111.2", 14230, 0xd718262a, 0xc626b0ea},
    {"12.22.207.184", 38024, "24.19.198.95", 12898, 0xd2d0a5de, 0x5c2b394a},
    {"209.142.163.6", 2217, "38.27.205.30", 48228, 0x82989176, 0xafc7327f},
    {"202.188.127.2", 1303, "153.39.163.191", 44251, 0x5d1809c5, 0x10e828a2},
};

struct V6 {
  const char* dst;
  uint16_t dport;
  const char* src;
  uint16_t sport;
  uint32_t ip, tcp;
};
constexpr V6 kV6[] = {
    {"3ffe:2501:200:3::1", 1766, "3ffe:2501:200:1fff::7", 2794, 0x2cc18cd5, 0x40207d3d},
    {"ff02::1", 4739, "3ffe:501:8::260:97ff:fe40:efab", 14230, 0x0f0c461c, 0xdde51bbf},
    {"fe80::200:f8ff:fe21:67cf", 38024, "3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251, 0x4b61e985, 0x02d1feef},
};

TEST(ToeplitzTest, MicrosoftIpv4Vectors) {
  for (const V4& v : kV4) {
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
  for (const V6& v : kV6) {
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

}  // namespace
}  // namespace softverbs::transport::raw
