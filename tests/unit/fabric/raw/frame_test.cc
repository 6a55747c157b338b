#include "fabric/raw/frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace softverbs::fabric::raw {
namespace {

// An Ethernet + IPv4 + UDP frame with `payload` bytes; checksums left 0.
std::vector<uint8_t> Udp4Frame(size_t payload, bool vlan = false) {
  std::vector<uint8_t> f = {0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1};
  if (vlan) f.insert(f.end(), {0x81, 0x00, 0x20, 0x07});  // PCP 1, VID 7
  f.insert(f.end(), {0x08, 0x00});
  const uint16_t total = static_cast<uint16_t>(20 + 8 + payload);
  f.insert(f.end(), {0x45, 0, uint8_t(total >> 8), uint8_t(total), 0x12, 0x34, 0x40, 0, 64, 17, 0, 0,
                     10, 0, 0, 1, 10, 0, 0, 2});
  const uint16_t ulen = static_cast<uint16_t>(8 + payload);
  f.insert(f.end(), {0x30, 0x39, 0x00, 0x50, uint8_t(ulen >> 8), uint8_t(ulen), 0, 0});
  for (size_t i = 0; i < payload; ++i) f.push_back(static_cast<uint8_t>(i * 7 + 1));
  return f;
}

TEST(FrameTest, ParsesEthernetVlanIpv4Udp) {
  auto f = Udp4Frame(10, true);
  FrameView v;
  ASSERT_TRUE(ParseFrame(f, &v));
  EXPECT_TRUE(v.has_vlan);
  EXPECT_EQ(v.vlan_tci, 0x2007);
  EXPECT_EQ(v.ether_type, kEtherTypeIpv4);  // the type after the tag (ibv_create_flow(3) note 3)
  EXPECT_EQ(v.ip_version, 4);
  EXPECT_EQ(v.ip_proto, kIpProtoUdp);
  EXPECT_EQ(v.src_port, 12345);
  EXPECT_EQ(v.dst_port, 80);
  EXPECT_EQ(v.ip_end, f.size());
  const uint8_t dst[4] = {10, 0, 0, 2};
  EXPECT_EQ(memcmp(&v.ipv4_dst_be, dst, 4), 0);
}

TEST(FrameTest, ShortFrameIsRefusedAndTruncatedIpIsNotIp) {
  FrameView v;
  std::vector<uint8_t> tiny(13, 0);
  EXPECT_FALSE(ParseFrame(tiny, &v));
  auto f = Udp4Frame(0);
  f.resize(14 + 10);  // half an IPv4 header
  ASSERT_TRUE(ParseFrame(f, &v));
  EXPECT_EQ(v.ip_version, 0);
}

// RFC 1071 worked example (the IPv4 header on Wikipedia's "Internet checksum" page): checksum b861.
TEST(FrameTest, Ipv4HeaderChecksumKnownVector) {
  std::vector<uint8_t> f = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x08, 0x00,
                            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00,
                            0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  f.resize(14 + 0x73, 0);  // the datagram's length; a UDP header of zeros follows
  FillChecksums(f);
  EXPECT_EQ(f[24], 0xb8);
  EXPECT_EQ(f[25], 0x61);
}

TEST(FrameTest, FilledChecksumsVerifyAndAnyFlippedBitFails) {
  for (size_t payload : {0u, 1u, 13u, 200u}) {
    auto f = Udp4Frame(payload);
    FrameView v;
    ASSERT_TRUE(ParseFrame(f, &v));
    EXPECT_FALSE(ChecksumsOk(f, v));
    FillChecksums(f);
    EXPECT_TRUE(ChecksumsOk(f, v)) << payload;
    // The UDP checksum by hand: pseudo header + UDP header + payload, one's complement.
    uint32_t sum = 0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 17 + (8 + payload);
    for (size_t i = 34; i + 1 < f.size(); i += 2) sum += (i == 40) ? 0 : (f[i] << 8 | f[i + 1]);
    if ((f.size() - 34) % 2) sum += f.back() << 8;
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    uint16_t want = static_cast<uint16_t>(~sum);
    if (want == 0) want = 0xffff;
    EXPECT_EQ(f[40] << 8 | f[41], want);
    for (size_t byte : {size_t{16}, size_t{27}, f.size() - 1}) {
      auto g = f;
      g[byte] ^= 0x10;
      FrameView w;
      ParseFrame(g, &w);
      EXPECT_FALSE(ChecksumsOk(g, w)) << "byte " << byte;
    }
  }
}

TEST(FrameTest, UdpWithoutChecksumIsAcceptedOnIpv4) {
  auto f = Udp4Frame(5);
  FillChecksums(f);
  f[40] = f[41] = 0;  // RFC 768: no checksum
  FrameView v;
  ParseFrame(f, &v);
  EXPECT_TRUE(ChecksumsOk(f, v));
}

TEST(FrameTest, Tcp6ChecksumVerifies) {
  std::vector<uint8_t> f = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd};
  const uint16_t plen = 20 + 4;
  f.insert(f.end(), {0x60, 0, 0, 0, 0, plen, 6, 64});
  for (int i = 0; i < 32; ++i) f.push_back(static_cast<uint8_t>(i == 15 ? 1 : i == 31 ? 2 : 0xfe));
  f.insert(f.end(), {0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0, 'p', 'i', 'n', 'g'});
  FillChecksums(f);
  FrameView v;
  ASSERT_TRUE(ParseFrame(f, &v));
  EXPECT_EQ(v.ip_version, 6);
  EXPECT_EQ(v.dst_port, 5678);
  // Verify by summing everything again: a correct checksum folds to all ones.
  uint32_t sum = OnesSum(f.data() + 22, 32) + 6 + plen;
  EXPECT_EQ(FoldChecksum(OnesSum(f.data() + v.l4_offset, plen, sum)), 0xffff);
  EXPECT_FALSE(ChecksumsOk(f, v));  // IBV_WC_IP_CSUM_OK is for IPv4 (mlx5: L3 header type IPv4)
}

// IEEE 802.3 CRC-32 check value: "123456789" -> 0xCBF43926, sent least significant byte first.
TEST(FrameTest, FcsKnownVector) {
  const char* s = "123456789";
  uint8_t fcs[4];
  EthernetFcs({reinterpret_cast<const uint8_t*>(s), 9}, fcs);
  EXPECT_EQ(fcs[0], 0x26);
  EXPECT_EQ(fcs[1], 0x39);
  EXPECT_EQ(fcs[2], 0xf4);
  EXPECT_EQ(fcs[3], 0xcb);
}

TEST(FrameTest, VxlanInnerFrameIsFound) {
  auto inner = Udp4Frame(4);
  auto f = Udp4Frame(8 + inner.size());
  f[36] = 0x12, f[37] = 0xb5;  // UDP destination 4789
  f[42] = 0x08;                // VXLAN flags: VNI valid
  f[46] = 0x00, f[47] = 0x01, f[48] = 0x02;  // VNI 0x102
  memcpy(f.data() + 50, inner.data(), inner.size());
  FrameView v;
  ASSERT_TRUE(ParseFrame(f, &v));
  EXPECT_TRUE(v.has_vxlan);
  EXPECT_EQ(v.vxlan_vni, 0x102u);
  EXPECT_EQ(v.inner_offset, 50u);
}

}  // namespace
}  // namespace softverbs::fabric::raw
