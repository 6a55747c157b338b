#include "transport/raw/tso.h"

#include <gtest/gtest.h>

#include <vector>

#include "fabric/raw/frame.h"

namespace softverbs::transport::raw {
namespace {

// Ethernet + IPv4 (id 0x1000) + TCP (seq 0xfffffc00, flags CWR|PSH|FIN|ACK, 12 bytes of options).
std::vector<uint8_t> Header4() {
  // (One list: inserting the options afterwards draws a false -Warray-bounds from GCC 12 at -O3.)
  return {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00,
          0x45, 0, 0, 0, 0x10, 0x00, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
          0x30, 0x39, 0x00, 0x50, 0xff, 0xff, 0xfc, 0x00, 0, 0, 0, 1,
          0x80,  // data offset 8 words: 32 bytes of TCP header
          0x99, 0xff, 0xff, 0, 0, 0, 0,
          1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2};  // options: NOP, NOP, timestamps
}

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Be32(const uint8_t* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; }

TEST(TsoTest, Ipv4SegmentsCarryTheHeadersANicWrites) {
  const auto h = Header4();
  std::vector<uint8_t> payload(2500);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 13);
  std::vector<std::vector<uint8_t>> out;
  ASSERT_TRUE(SegmentTso(h, payload, 1000, &out));
  ASSERT_EQ(out.size(), 3u);
  const size_t sizes[3] = {1000, 1000, 500};
  for (size_t i = 0; i < 3; ++i) {
    const auto& f = out[i];
    ASSERT_EQ(f.size(), h.size() + sizes[i]);
    EXPECT_EQ(Be16(f.data() + 16), 20 + 32 + sizes[i]) << i;          // IPv4 total length
    EXPECT_EQ(Be16(f.data() + 18), 0x1000 + i) << i;                  // identification counts up
    EXPECT_EQ(Be32(f.data() + 38), static_cast<uint32_t>(0xfffffc00u + 1000 * i)) << i;  // wraps past 2^32
    const uint8_t flags = f[47];
    EXPECT_EQ((flags & 0x80) != 0, i == 0) << i;                      // CWR on the first only
    EXPECT_EQ((flags & 0x09) != 0, i == 2) << i;                      // FIN, PSH on the last only
    EXPECT_TRUE(flags & 0x10);                                        // ACK everywhere
    EXPECT_TRUE(std::equal(f.begin() + 54, f.begin() + 66, h.begin() + 54));  // options copied
    EXPECT_TRUE(std::equal(f.begin() + 66, f.end(), payload.begin() + 1000 * i));
    fabric::raw::FrameView v;
    ASSERT_TRUE(fabric::raw::ParseFrame(f, &v));
    EXPECT_TRUE(fabric::raw::ChecksumsOk(f, v)) << i;  // IPv4 header and TCP checksums
  }
}

TEST(TsoTest, Ipv6PayloadLengthAndChecksum) {
  std::vector<uint8_t> h = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd, 0x60, 0, 0, 0, 0, 0, 6, 64};
  for (int i = 0; i < 32; ++i) h.push_back(static_cast<uint8_t>(i));
  h.insert(h.end(), {0x30, 0x39, 0x00, 0x50, 0, 0, 0, 7, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0});
  std::vector<uint8_t> payload(1500, 0xab);
  std::vector<std::vector<uint8_t>> out;
  ASSERT_TRUE(SegmentTso(h, payload, 1400, &out));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(Be16(out[1].data() + 18), 20 + 100);  // IPv6 payload length of the last
  for (const auto& f : out) {
    fabric::raw::FrameView v;
    ASSERT_TRUE(fabric::raw::ParseFrame(f, &v));
    const size_t l4 = v.l4_offset, len = v.ip_end - l4;
    uint32_t sum = fabric::raw::OnesSum(f.data() + 22, 32) + 6 + static_cast<uint32_t>(len);
    EXPECT_EQ(fabric::raw::FoldChecksum(fabric::raw::OnesSum(f.data() + l4, len, sum)), 0xffff);
  }
  EXPECT_EQ(Be32(out[1].data() + 58), 7u + 1400);
}

TEST(TsoTest, BadHeadersAndMssAreRefused) {
  std::vector<std::vector<uint8_t>> out;
  std::vector<uint8_t> payload(10);
  auto h = Header4();
  EXPECT_FALSE(SegmentTso(h, payload, 0, &out));
  auto udp = h;
  udp[23] = 17;
  EXPECT_FALSE(SegmentTso(udp, payload, 100, &out));
  auto cut = h;
  cut.pop_back();  // shorter than its TCP data offset says
  EXPECT_FALSE(SegmentTso(cut, payload, 100, &out));
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace softverbs::transport::raw
