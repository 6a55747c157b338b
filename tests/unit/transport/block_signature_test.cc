#include "transport/block_signature.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace softverbs::transport {
namespace {

const uint8_t* SigCheckString() { return reinterpret_cast<const uint8_t*>("123456789"); }

// The catalogue check values ("123456789") of each algorithm.
TEST(BlockSignatureTest, StandardCheckValues) {
  EXPECT_EQ(SigCrc32(0xFFFFFFFF, SigCheckString(), 9), 0xCBF43926u);   // CRC-32 (FC-PH, IEEE 802.3)
  EXPECT_EQ(SigCrc32c(0xFFFFFFFF, SigCheckString(), 9), 0xE3069283u);  // CRC-32C (iSCSI)
  EXPECT_EQ(SigCrc16T10Dif(0, SigCheckString(), 9), 0xD0DBu);         // CRC-16/T10-DIF
  // CRC64_XP10: Project Zipline's XP10CRC64, whose parameters are CRC-64/NVME's.
  EXPECT_EQ(SigCrc64Xp10(~uint64_t{0}, SigCheckString(), 9), 0xAE8B14860A799888ull);
  EXPECT_NE(SigCrc64Xp10(0, SigCheckString(), 9), 0xAE8B14860A799888ull);
  // Seeds change the result (mlx5 accepts 0 and all-ones).
  EXPECT_NE(SigCrc32(0, SigCheckString(), 9), 0xCBF43926u);
  EXPECT_NE(SigCrc16T10Dif(0xFFFF, SigCheckString(), 9), 0xD0DBu);
}

// RFC 1071's checksum of a textbook IPv4 header (its checksum field zeroed) is 0xB861; with
// the checksum in place the header sums to zero.
TEST(BlockSignatureTest, IpChecksum) {
  uint8_t h[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                   0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
  EXPECT_EQ(SigIpChecksum(0, h, sizeof h), 0xB861u);
  h[10] = 0xB8, h[11] = 0x61;
  EXPECT_EQ(SigIpChecksum(0, h, sizeof h), 0u);
  const uint8_t odd[3] = {0x01, 0x02, 0x03};  // padded: 0x0102 + 0x0300
  EXPECT_EQ(SigIpChecksum(0, odd, 3), static_cast<uint16_t>(~0x0402));
}

std::vector<uint8_t> SigBlocks(size_t n, uint32_t block) {
  std::vector<uint8_t> v(n * block);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7 + 3);
  return v;
}

SigDomain SigDif(uint16_t app, uint32_t ref, bool inc) {
  SigDomain d;
  d.kind = SigKind::kT10Dif;
  d.block_size = 512;
  d.app_tag = app;
  d.ref_tag = ref;
  d.ref_increments = inc;
  return d;
}

// Memory without signature, wire with T10-DIF (mlx5dv_wr_set_mkey_sig_block(3) example 2):
// each 512-byte block is followed by guard, app tag and the incrementing ref tag; converting
// back checks and strips them.
TEST(BlockSignatureTest, T10DifGenerateCheckStrip) {
  const std::vector<uint8_t> data = SigBlocks(3, 512);
  const SigDomain none;
  const SigDomain dif = SigDif(0x1234, 100, true);
  std::vector<uint8_t> wire, back;
  SigError err;
  ASSERT_TRUE(SigConvert(none, dif, 0xFF, data.data(), data.size(), &wire, &err));
  ASSERT_EQ(wire.size(), 3u * 520);
  EXPECT_EQ(err.kind, SigErrorKind::kNone);
  for (size_t b = 0; b < 3; ++b) {
    const uint8_t* f = wire.data() + b * 520 + 512;
    const uint16_t guard = SigCrc16T10Dif(0, data.data() + b * 512, 512);
    EXPECT_EQ(f[0] << 8 | f[1], guard);
    EXPECT_EQ(f[2] << 8 | f[3], 0x1234);
    EXPECT_EQ(static_cast<uint32_t>(f[4] << 24 | f[5] << 16 | f[6] << 8 | f[7]), 100 + b);
    EXPECT_EQ(memcmp(wire.data() + b * 520, data.data() + b * 512, 512), 0);
  }
  ASSERT_TRUE(SigConvert(dif, none, 0xFF, wire.data(), wire.size(), &back, &err));
  EXPECT_EQ(err.kind, SigErrorKind::kNone);
  EXPECT_EQ(back, data);
}

// The first bad block is reported, guard before app tag before ref tag, at its offset in the
// input stream; check_mask bits that are clear skip those bytes.
TEST(BlockSignatureTest, T10DifErrorsInTheirOrder) {
  const std::vector<uint8_t> data = SigBlocks(4, 512);
  const SigDomain none;
  const SigDomain dif = SigDif(7, 0, true);
  std::vector<uint8_t> wire, out;
  SigError err;
  ASSERT_TRUE(SigConvert(none, dif, 0xFF, data.data(), data.size(), &wire, &err));
  std::vector<uint8_t> bad = wire;
  bad[2 * 520 + 5] ^= 0x40;  // block 2: one data byte
  bad[3 * 520 + 512 + 3] ^= 1;  // block 3: the app tag
  ASSERT_TRUE(SigConvert(dif, none, 0xFF, bad.data(), bad.size(), &out, &err));
  EXPECT_EQ(err.kind, SigErrorKind::kGuard);
  EXPECT_EQ(err.offset, 2u * 520);
  EXPECT_EQ(err.expected, static_cast<uint64_t>(wire[2 * 520 + 512] << 8 | wire[2 * 520 + 513]));
  EXPECT_EQ(err.actual, SigCrc16T10Dif(0, bad.data() + 2 * 520, 512));
  EXPECT_EQ(out.size(), data.size());  // the data still moves
  // Without the guard bytes in check_mask, block 3's app tag is the first error.
  ASSERT_TRUE(SigConvert(dif, none, 0x3F, bad.data(), bad.size(), &out, &err));
  EXPECT_EQ(err.kind, SigErrorKind::kAppTag);
  EXPECT_EQ(err.offset, 3u * 520);
  EXPECT_EQ(err.actual, 6u);
  EXPECT_EQ(err.expected, 7u);
  // A ref tag that does not increment as configured.
  SigDomain fixed = dif;
  fixed.ref_increments = false;
  ASSERT_TRUE(SigConvert(fixed, none, 0xFF, wire.data(), wire.size(), &out, &err));
  EXPECT_EQ(err.kind, SigErrorKind::kRefTag);
  EXPECT_EQ(err.offset, 520u);
  EXPECT_EQ(err.actual, 1u);
  EXPECT_EQ(err.expected, 0u);
  // APP_ESCAPE: app tag 0xFFFF skips the guard check.
  SigDomain escape = SigDif(0xFFFF, 0, true);
  ASSERT_TRUE(SigConvert(none, escape, 0xFF, data.data(), data.size(), &wire, &err));
  wire[9] ^= 1;
  escape.app_escape = true;
  ASSERT_TRUE(SigConvert(escape, none, 0xFF, wire.data(), wire.size(), &out, &err));
  EXPECT_EQ(err.kind, SigErrorKind::kNone);
}

// CRC32 / CRC32C in memory, none on the wire (example 1): checked and stripped; the IP
// checksum guard variant of T10-DIF.
TEST(BlockSignatureTest, CrcDomainsAndIpChecksumGuard) {
  const std::vector<uint8_t> data = SigBlocks(2, 512);
  const SigDomain none;
  for (SigKind kind : {SigKind::kCrc32, SigKind::kCrc32c, SigKind::kCrc64Xp10}) {
    SigDomain crc;
    crc.kind = kind;
    crc.seed = kind == SigKind::kCrc64Xp10 ? ~uint64_t{0} : 0xFFFFFFFF;
    const size_t field = kind == SigKind::kCrc64Xp10 ? 8 : 4;
    const uint8_t mask = kind == SigKind::kCrc64Xp10 ? 0xFF : 0xF0;
    std::vector<uint8_t> mem, wire;
    SigError err;
    ASSERT_TRUE(SigConvert(none, crc, mask, data.data(), data.size(), &mem, &err));
    ASSERT_EQ(mem.size(), 2 * (512 + field));
    const uint64_t want = kind == SigKind::kCrc32    ? SigCrc32(0xFFFFFFFF, data.data() + 512, 512)
                          : kind == SigKind::kCrc32c ? SigCrc32c(0xFFFFFFFF, data.data() + 512, 512)
                                                     : SigCrc64Xp10(~uint64_t{0}, data.data() + 512, 512);
    uint64_t held = 0;  // the second block's field, big-endian
    for (size_t i = 0; i < field; ++i) held = held << 8 | mem[2 * 512 + field + i];
    EXPECT_EQ(held, want);
    mem[512 + field] ^= 0x80;
    ASSERT_TRUE(SigConvert(crc, none, mask, mem.data(), mem.size(), &wire, &err));
    EXPECT_EQ(err.kind, SigErrorKind::kGuard);
    EXPECT_EQ(err.offset, 512 + field);
    EXPECT_EQ(err.expected, want);
  }
  SigDomain csum = SigDif(0, 0, false);
  csum.guard = GuardKind::kIpChecksum;
  std::vector<uint8_t> wire;
  SigError err;
  ASSERT_TRUE(SigConvert(none, csum, 0xFF, data.data(), data.size(), &wire, &err));
  EXPECT_EQ(wire[512] << 8 | wire[513], SigIpChecksum(0, data.data(), 512));
}

// Partial blocks and mismatched block sizes are not converted.
TEST(BlockSignatureTest, WholeBlocksOnly) {
  const std::vector<uint8_t> data = SigBlocks(2, 512);
  SigDomain dif = SigDif(0, 0, false);
  std::vector<uint8_t> out;
  SigError err;
  EXPECT_FALSE(SigConvert(SigDomain{}, dif, 0xFF, data.data(), 1000, &out, &err));
  SigDomain other = dif;
  other.block_size = 4096;
  EXPECT_FALSE(SigConvert(dif, other, 0xFF, data.data(), 520, &out, &err));
}

}  // namespace
}  // namespace softverbs::transport
