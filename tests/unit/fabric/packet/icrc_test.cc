#include "fabric/packet/icrc.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "fabric/packet/crc32.h"
#include "fabric/packet/opcode.h"
#include "tests/unit/fabric/packet/capture_reader.h"

namespace softverbs::fabric::packet {
namespace {

using testing::AllCapturedPackets;
using testing::CapturedPacket;

// Bit-at-a-time CRC-32 (the definition), to check the slice-by-8 tables against.
uint32_t ReferenceCrc32(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ ((crc & 1) ? 0xEDB88320u : 0);
  }
  return crc;
}

TEST(Crc32Test, MatchesTheStandardCheckValue) {
  const char* check = "123456789";  // the CRC-32/ISO-HDLC check value (zlib.crc32)
  EXPECT_EQ(Crc32(check, 9), 0xCBF43926u);
  EXPECT_EQ(Crc32(nullptr, 0), 0u);
}

TEST(Crc32Test, RxeSeedIsTheCrcOfEightOnesBytes) {
  // rxe_icrc.c starts from 0xdebb20e3: "the result of computing a CRC with a seed of 0xffffffff
  // and 8 bytes of 0xff representing a masked LRH".
  const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(Crc32Update(~0u, ones, 8), 0xdebb20e3u);
}

TEST(Crc32Test, SliceBy8EqualsBitwiseAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(600);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t len = 0; len + offset <= buf.size(); len += (len < 40 ? 1 : 37)) {
      uint32_t seed = static_cast<uint32_t>(rng());
      ASSERT_EQ(Crc32Update(seed, buf.data() + offset, len),
                ReferenceCrc32(seed, buf.data() + offset, len))
          << "offset " << offset << " len " << len;
    }
}

TEST(IcrcTest, EveryCapturedIpv4PacketCarriesTheIcrcWeCompute) {
  auto pkts = AllCapturedPackets();
  ASSERT_EQ(pkts.size(), 106u);
  for (const CapturedPacket& p : pkts) {
    std::span<const uint8_t> all(p.udp_payload);
    uint32_t carried = LoadIcrc(all.data() + all.size() - 4);
    EXPECT_EQ(ComputeIcrc(p.flow, all.first(all.size() - 4)), carried);
    EXPECT_TRUE(CheckIcrc(p.flow, all).ok());
  }
}

TEST(IcrcTest, SynthesizedIpv4HeadersEqualTheCapturedOnes) {
  for (const CapturedPacket& p : AllCapturedPackets()) {
    uint8_t hdr[kMaxIpUdpHeaderBytes];
    size_t n = WriteIpUdpHeaders(p.flow, p.udp_payload.size(), /*checksums=*/false, nullptr, hdr);
    ASSERT_EQ(n, p.ip_udp.size());
    std::vector<uint8_t> ours(hdr, hdr + n), captured = p.ip_udp;
    ours[10] = ours[11] = captured[10] = captured[11] = 0;  // the IPv4 checksum, checked below
    EXPECT_EQ(ours, captured);  // rxe sends UDP checksum 0, as we do without checksums
    n = WriteIpUdpHeaders(p.flow, p.udp_payload.size(), /*checksums=*/true, p.udp_payload.data(),
                          hdr);
    EXPECT_EQ(hdr[10], p.ip_udp[10]);
    EXPECT_EQ(hdr[11], p.ip_udp[11]);
  }
}

// An IPv6 RC SEND_ONLY_WITH_IMMEDIATE with a 5-byte payload (pad 3), fd00::2 -> fd00::3, UDP
// 0xc123 -> 4791, traffic class 0x68, flow label 0x12345, hop limit 64. The ICRC was computed
// with Python's zlib.crc32 over the pseudo header masked as rxe_icrc.c masks it (no IPv6 rxe
// capture is at hand), an implementation independent of this one.
const uint8_t kIpv6Packet[] = {0x05, 0xb0, 0xff, 0xff, 0x00, 0x00, 0x01, 0x23, 0x80, 0x00,
                               0xab, 0xcd, 0xde, 0xad, 0xbe, 0xef, 'h',  'e',  'l',  'l',
                               'o',  0x00, 0x00, 0x00, 0x98, 0x42, 0xb5, 0xab};

IpUdpInfo Ipv6Flow() {
  uint8_t src[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  uint8_t dst[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
  IpUdpInfo flow = IpUdpInfo::V6(src, dst, 0xc123);
  flow.traffic_class = 0x68;
  flow.flow_label = 0x12345;
  flow.hop_limit = 64;
  return flow;
}

TEST(IcrcTest, Ipv6KnownAnswer) {
  std::span<const uint8_t> pkt(kIpv6Packet);
  EXPECT_EQ(ComputeIcrc(Ipv6Flow(), pkt.first(pkt.size() - 4)), 0xabb54298u);
  EXPECT_TRUE(CheckIcrc(Ipv6Flow(), pkt).ok());
}

// The fields routers rewrite are outside the ICRC (IBA Annex A17); addresses, ports and the IPv4 ID
// are inside.
TEST(IcrcTest, MaskedFieldsDoNotMatterOthersDo) {
  std::span<const uint8_t> body = std::span<const uint8_t>(kIpv6Packet).first(24);
  IpUdpInfo base = Ipv6Flow();
  uint32_t want = ComputeIcrc(base, body);
  IpUdpInfo f = base;
  f.traffic_class = 0x02, f.flow_label = 0, f.hop_limit = 1;
  EXPECT_EQ(ComputeIcrc(f, body), want);
  std::vector<uint8_t> fecn(body.begin(), body.end());
  fecn[4] = 0xc0;  // FECN and BECN set by the network
  EXPECT_EQ(ComputeIcrc(base, fecn), want);
  f = base, f.src_port ^= 1;
  EXPECT_NE(ComputeIcrc(f, body), want);
  f = base, f.dst[15] ^= 1;
  EXPECT_NE(ComputeIcrc(f, body), want);

  CapturedPacket p = AllCapturedPackets().front();
  auto v4 = std::span<const uint8_t>(p.udp_payload).first(p.udp_payload.size() - 4);
  uint32_t v4_want = ComputeIcrc(p.flow, v4);
  f = p.flow, f.traffic_class = 0xb8, f.hop_limit = 3;
  EXPECT_EQ(ComputeIcrc(f, v4), v4_want);
  f = p.flow, f.ip_id ^= 0x100;
  EXPECT_NE(ComputeIcrc(f, v4), v4_want);
  f = p.flow, f.dont_fragment = false;
  EXPECT_NE(ComputeIcrc(f, v4), v4_want);
}

TEST(IcrcTest, CheckRefusesAMismatchAndAShortPacket) {
  std::vector<uint8_t> pkt(std::begin(kIpv6Packet), std::end(kIpv6Packet));
  pkt.back() ^= 0x01;
  Status s = CheckIcrc(Ipv6Flow(), pkt);
  EXPECT_EQ(s.code(), EBADMSG);
  EXPECT_NE(s.rule().find("ICRC mismatch"), std::string::npos) << s.rule();
  EXPECT_EQ(CheckIcrc(Ipv6Flow(), std::span<const uint8_t>(kIpv6Packet).first(15)).code(), EINVAL);
}

// A receiver on a UDP socket does not see the IPv4 ID rxe chose; the ICRC tells it.
TEST(IcrcTest, RecoversRxesIpv4IdFromTheIcrc) {
  for (const CapturedPacket& p : AllCapturedPackets()) {
    IpUdpInfo blind = p.flow;
    blind.ip_id = 0x1234;  // ignored
    auto id = RecoverIpv4Id(blind, p.udp_payload);
    ASSERT_TRUE(id.ok()) << id.status().rule();
    EXPECT_EQ(*id, p.flow.ip_id);
  }
  EXPECT_EQ(RecoverIpv4Id(Ipv6Flow(), kIpv6Packet).status().code(), EINVAL);
}

// With the ID unknown the check keeps 16 bits: a corrupt packet passes with probability about
// 2^-16, so of the ~90k single-bit flips of the captures only a handful may pass (and no flip
// may pass with the captured ID itself).
TEST(IcrcTest, UnknownIdCheckStillRefusesAlmostEveryCorruption) {
  size_t flips = 0, passed = 0;
  for (const CapturedPacket& p : AllCapturedPackets()) {
    for (size_t bit = 0; bit < p.udp_payload.size() * 8; ++bit) {
      if (bit / 8 == 4) continue;  // BTH resv8a is outside the ICRC
      std::vector<uint8_t> bad = p.udp_payload;
      bad[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      ++flips;
      auto id = RecoverIpv4Id(p.flow, bad);
      if (!id.ok()) {
        EXPECT_EQ(id.status().code(), EBADMSG);
        continue;
      }
      ++passed;
      EXPECT_NE(*id, p.flow.ip_id);
    }
  }
  EXPECT_GT(flips, 50000u);
  EXPECT_LE(passed, 8u) << "of " << flips;
}

}  // namespace
}  // namespace softverbs::fabric::packet

namespace softverbs::fabric::packet {
namespace {

// The folded (PCLMULQDQ / VPCLMULQDQ) CRC agrees with the tables for every length around its
// 16-, 64- and 128-byte steps, every alignment and any starting state (on a CPU without them both
// are the tables, and the test still holds).
TEST(Crc32Test, TheFoldedCrcAgreesWithTheTables) {
  std::vector<uint8_t> data(9000 + 16);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  for (size_t offset = 0; offset < 16; offset += 5)
    for (size_t len = 0; len < 600; ++len)
      for (uint32_t state : {0u, ~0u, 0x12345678u})
        ASSERT_EQ(Crc32Update(state, data.data() + offset, len), Crc32UpdateTable(state, data.data() + offset, len))
            << "offset " << offset << " length " << len;
  for (size_t len : {4096u, 4096u + 40u, 8192u + 7u, 9000u})
    EXPECT_EQ(Crc32Update(~0u, data.data() + 3, len), Crc32UpdateTable(~0u, data.data() + 3, len));
}

}  // namespace
}  // namespace softverbs::fabric::packet

namespace softverbs::fabric::packet {
namespace {

// Zero extension in O(log n) equals feeding the zeros one by one, from any register.
TEST(Crc32Test, ZeroExtensionEqualsFeedingZeros) {
  std::vector<uint8_t> zeros(70000);
  for (uint32_t state : {0u, ~0u, 0x12345678u, 0x80000001u}) {
    for (size_t n = 0; n < 300; ++n)
      ASSERT_EQ(Crc32ZeroExtend(state, n), Crc32UpdateTable(state, zeros.data(), n)) << "n " << n;
    for (size_t n : {4096u, 4136u, 9000u, 65535u, 70000u})
      EXPECT_EQ(Crc32ZeroExtend(state, n), Crc32UpdateTable(state, zeros.data(), n)) << "n " << n;
  }
}

// A UDP GSO send's segments carry IPv4 IDs 0, 1, 2...: the ICRC computed for ID 0 and moved by
// Ipv4IdIcrcEffect is the ICRC computed for that ID, for every captured IPv4 packet.
TEST(IcrcTest, TheIdEffectMovesAnIcrcToAnotherIpv4Id) {
  size_t checked = 0;
  for (const CapturedPacket& p : AllCapturedPackets()) {
    if (p.flow.ipv6) continue;
    auto body = std::span<const uint8_t>(p.udp_payload).first(p.udp_payload.size() - kIcrcBytes);
    IpUdpInfo flow = p.flow;
    flow.ip_id = 0;
    const uint32_t at_zero = ComputeIcrc(flow, body);
    for (uint16_t id : {uint16_t{1}, uint16_t{2}, uint16_t{63}, uint16_t{0x8000}, uint16_t{0xffff}}) {
      flow.ip_id = id;
      ASSERT_EQ(at_zero ^ Ipv4IdIcrcEffect(id, p.udp_payload.size()), ComputeIcrc(flow, body)) << "id " << id;
    }
    EXPECT_EQ(Ipv4IdIcrcEffect(0, p.udp_payload.size()), 0u);
    ++checked;
  }
  EXPECT_GT(checked, 10u);
  EXPECT_EQ(Ipv4IdIcrcEffect(7, 3), 0u);  // shorter than BTH + ICRC: nothing to move
}

}  // namespace
}  // namespace softverbs::fabric::packet
