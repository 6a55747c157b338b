#include "core/mkey_signature.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace softverbs::core {
namespace {

SigDomainSpec Crc(uint32_t crc_type = sig::kCrc32, uint64_t seed = 0xffffffff, uint32_t block = sig::kBlock512) {
  SigDomainSpec d;
  d.present = true;
  d.type = sig::kTypeCrc;
  d.crc_type = crc_type;
  d.seed = seed;
  d.block_size = block;
  return d;
}

SigDomainSpec Dif(uint16_t bg = 0xffff, uint16_t flags = sig::kRefRemap, uint16_t app = 1, uint32_t ref = 2) {
  SigDomainSpec d;
  d.present = true;
  d.type = sig::kTypeT10Dif;
  d.bg_type = sig::kBgCrc;
  d.bg = bg;
  d.flags = flags;
  d.app_tag = app;
  d.ref_tag = ref;
  d.block_size = sig::kBlock512;
  return d;
}

int Code(const SigBlockSpec& s) {
  auto r = SigConfigOf(s);
  return r.ok() ? 0 : r.status().code();
}

TEST(MkeySignatureTest, AcceptedAndConverted) {
  SigBlockSpec s;
  s.wire = Dif();
  s.check_mask = 0xff;
  auto c = SigConfigOf(s);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->active, 1u);
  EXPECT_EQ(c->mem.kind, transport::SigKind::kNone);
  EXPECT_EQ(c->wire.kind, transport::SigKind::kT10Dif);
  EXPECT_TRUE(c->wire.ref_increments);
  EXPECT_EQ(c->wire.block_size, 512u);
  EXPECT_EQ(c->copy_mask, 0);
  // Same block structure: mlx5 copies the bytes that mean the same in both domains.
  s.mem = Dif(0xffff, sig::kRefRemap, 1, 9);
  c = SigConfigOf(s);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->copy_mask, 0xf0);
  s.flags = sig::kAttrCopyMask;
  s.copy_mask = 0x0f;
  EXPECT_EQ(SigConfigOf(s)->copy_mask, 0x0f);
  SigBlockSpec crc;
  crc.mem = Crc(sig::kCrc32c, 0);
  crc.wire = Crc(sig::kCrc32c, 0xffffffff);
  EXPECT_EQ(SigConfigOf(crc)->copy_mask, 0xf0);
  EXPECT_EQ(SigConfigOf(crc)->mem.kind, transport::SigKind::kCrc32c);
}

// mlx5_send_wr_set_mkey_sig_block's EINVAL cases, and what softverbs does not compute.
TEST(MkeySignatureTest, Refusals) {
  SigBlockSpec none;
  EXPECT_EQ(Code(none), EINVAL);
  SigBlockSpec s;
  s.wire = Crc();
  s.wire.block_size = 5;
  EXPECT_EQ(Code(s), EINVAL);
  s.wire = Crc(sig::kCrc32, 7);
  EXPECT_EQ(Code(s), EINVAL);
  s.wire = Crc(9);
  EXPECT_EQ(Code(s), EINVAL);
  // mlx5_validate_sig_crc: a CRC64_XP10 seed is 0 or UINT64_MAX (a CRC32 all-ones is not one).
  s.wire = Crc(sig::kCrc64Xp10, 0xffffffff);
  EXPECT_EQ(Code(s), EINVAL);
  s.wire = Crc(sig::kCrc64Xp10, 0);
  EXPECT_EQ(Code(s), 0);
  s.wire = Crc(sig::kCrc64Xp10, UINT64_MAX);
  EXPECT_EQ(SigConfigOf(s)->wire.kind, transport::SigKind::kCrc64Xp10);
  // Both domains CRC64_XP10: the whole 8-byte field is copied (MLX5DV_SIG_MASK_CRC64_XP10).
  s.mem = Crc(sig::kCrc64Xp10, 0);
  EXPECT_EQ(SigConfigOf(s)->copy_mask, 0xff);
  s.mem = {};
  s.wire = Dif(0x1234);
  EXPECT_EQ(Code(s), EINVAL);
  s.wire = Dif(0, 0x8);
  EXPECT_EQ(Code(s), EINVAL);
  s.wire = Dif();
  s.wire.bg_type = 2;
  EXPECT_EQ(Code(s), EINVAL);
  s.wire = Dif();
  s.wire.comp_mask = 1;
  EXPECT_EQ(Code(s), EINVAL);
  s.wire = Dif();
  s.comp_mask = 1;
  EXPECT_EQ(Code(s), EINVAL);
  s.comp_mask = 0;
  s.flags = 2;
  EXPECT_EQ(Code(s), EINVAL);
  s.flags = sig::kAttrCopyMask;  // no mem domain: no same block structure
  EXPECT_EQ(Code(s), EINVAL);
  s.flags = 0;
  s.mem = Crc(sig::kCrc32, 0, 3);  // 4096-byte memory blocks, 512-byte wire blocks
  EXPECT_EQ(Code(s), EOPNOTSUPP);
  s.mem = Crc();
  EXPECT_EQ(Code(s), 0);
}

TEST(MkeySignatureTest, Caps) {
  const SigCaps caps = SignatureCaps();
  EXPECT_EQ(caps.block_size, 0x1fu);  // 1 << MLX5DV_BLOCK_SIZE_512 ... 1 << MLX5DV_BLOCK_SIZE_4160
  EXPECT_EQ(caps.crc_type, 0x7u);     // CRC32, CRC32C, CRC64_XP10
  for (uint32_t v = 0; v < 5; ++v) EXPECT_NE(SigBlockBytes(v), 0u);
  EXPECT_EQ(SigBlockBytes(5), 0u);
}

}  // namespace
}  // namespace softverbs::core
