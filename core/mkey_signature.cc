#include "core/mkey_signature.h"

#include "base/strings.h"

namespace softverbs::core {
namespace {

using transport::SigConfig;
using transport::SigDomain;
using transport::SigKind;

// mlx5_validate_sig_block_domain / _t10dif / _crc: the field values mlx5 accepts.
Result<SigDomain> DomainOf(const char* which, const SigDomainSpec& d) {
  const std::string w = std::string(which) + " domain: ";
  SigDomain out;
  out.block_size = SigBlockBytes(d.block_size);
  if (out.block_size == 0) return Invalid(w + "block_size " + std::to_string(d.block_size) + " is no enum mlx5dv_block_size");
  if (d.comp_mask != 0) return Invalid(w + "comp_mask " + Hex(d.comp_mask) + " is not 0");
  if (d.type == sig::kTypeT10Dif) {
    if (d.bg != 0 && d.bg != 0xffff) return Invalid(w + "T10-DIF bg " + Hex(d.bg) + ": the guard seed is 0 or 0xffff");
    if (d.bg_type != sig::kBgCrc && d.bg_type != sig::kBgCsum)
      return Invalid(w + "T10-DIF bg_type " + std::to_string(d.bg_type) + " is neither CRC nor CSUM");
    if (d.flags & ~(sig::kRefRemap | sig::kAppEscape | sig::kAppRefEscape))
      return Invalid(w + "T10-DIF flags " + Hex(d.flags) + " beyond REF_REMAP, APP_ESCAPE, APP_REF_ESCAPE");
    out.kind = SigKind::kT10Dif;
    out.seed = d.bg;
    out.guard = d.bg_type == sig::kBgCrc ? transport::GuardKind::kCrc : transport::GuardKind::kIpChecksum;
    out.app_tag = d.app_tag;
    out.ref_tag = d.ref_tag;
    out.ref_increments = (d.flags & sig::kRefRemap) != 0;
    out.app_escape = (d.flags & sig::kAppEscape) != 0;
    out.app_ref_escape = (d.flags & sig::kAppRefEscape) != 0;
    return out;
  }
  if (d.type != sig::kTypeCrc) return Invalid(w + "sig_type " + std::to_string(d.type) + " is neither T10DIF nor CRC");
  // mlx5_validate_sig_crc: CRC32/CRC32C seeds are 0 or UINT32_MAX, CRC64_XP10's 0 or UINT64_MAX.
  if (d.crc_type == sig::kCrc64Xp10) {
    if (d.seed != 0 && d.seed != UINT64_MAX)
      return Invalid(w + "CRC seed " + Hex(d.seed) + ": a CRC64_XP10 seed is 0 or 0xffffffffffffffff");
    out.kind = SigKind::kCrc64Xp10;
    out.seed = d.seed;
    return out;
  }
  if (d.crc_type != sig::kCrc32 && d.crc_type != sig::kCrc32c)
    return Invalid(w + "crc type " + std::to_string(d.crc_type) + " is no enum mlx5dv_sig_crc_type");
  if (d.seed != 0 && d.seed != 0xffffffffu)
    return Invalid(w + "CRC seed " + Hex(d.seed) + ": a CRC32/CRC32C seed is 0 or 0xffffffff");
  out.kind = d.crc_type == sig::kCrc32 ? SigKind::kCrc32 : SigKind::kCrc32c;
  out.seed = d.seed;
  return out;
}

// mlx5_umr_block_crc_sbs / _t10dif_sbs: both domains have the same block structure, and the
// field bytes that stay the same from one to the other.
bool SameBlockStructure(const SigDomainSpec& mem, const SigDomainSpec& wire) {
  if (!mem.present || !wire.present || mem.type != wire.type || mem.block_size != wire.block_size) return false;
  return mem.type != sig::kTypeCrc || mem.crc_type == wire.crc_type;
}

}  // namespace

uint32_t SigBlockBytes(uint32_t v) {
  switch (v) {
    case 0: return 512;
    case 1: return 520;
    case 2: return 4048;
    case 3: return 4096;
    case 4: return 4160;
    default: return 0;
  }
}

Result<SigConfig> SigConfigOf(const SigBlockSpec& spec) {
  if (!spec.mem.present && !spec.wire.present) return Invalid("neither the mem nor the wire domain is set");
  if (spec.flags & ~sig::kAttrCopyMask) return Invalid("flags " + Hex(spec.flags) + " beyond MLX5DV_SIG_BLOCK_ATTR_FLAG_COPY_MASK");
  if (spec.comp_mask != 0) return Invalid("comp_mask " + Hex(spec.comp_mask) + " is not 0");
  SigConfig c;
  if (spec.mem.present) {
    auto d = DomainOf("mem", spec.mem);
    if (!d.ok()) return d.status();
    c.mem = *d;
  }
  if (spec.wire.present) {
    auto d = DomainOf("wire", spec.wire);
    if (!d.ok()) return d.status();
    c.wire = *d;
  }
  const bool sbs = SameBlockStructure(spec.mem, spec.wire);
  // mlx5_umr_fill_sig_bsf: a copy mask needs the same block structure in both domains.
  if ((spec.flags & sig::kAttrCopyMask) && !sbs)
    return Invalid("MLX5DV_SIG_BLOCK_ATTR_FLAG_COPY_MASK needs both domains of one signature type, block size "
                   "(and CRC type)");
  if (spec.mem.present && spec.wire.present && c.mem.block_size != c.wire.block_size)
    return NotSupported("mem block size " + std::to_string(c.mem.block_size) + " and wire block size " +
                        std::to_string(c.wire.block_size) + " differ: softverbs converts within one block size");
  // Without the flag mlx5 copies the field bytes that mean the same in both domains.
  uint8_t copy = 0;
  if (spec.flags & sig::kAttrCopyMask) {
    copy = spec.copy_mask;
  } else if (sbs && spec.mem.type == sig::kTypeCrc) {
    copy = spec.mem.crc_type == sig::kCrc64Xp10 ? 0xff : 0xf0;  // mlx5's MLX5DV_SIG_MASK_CRC64_XP10 / _CRC32
  } else if (sbs) {
    if (spec.mem.bg_type == spec.wire.bg_type && spec.mem.bg == spec.wire.bg) copy |= 0xc0;
    if (spec.mem.app_tag == spec.wire.app_tag) copy |= 0x30;
    if (spec.mem.ref_tag == spec.wire.ref_tag) copy |= 0x0f;
  }
  c.active = 1;
  c.check_mask = spec.check_mask;
  c.copy_mask = copy;
  return c;
}

SigCaps SignatureCaps() {
  // Every block size of enum mlx5dv_block_size (bit 1 << value); T10-DIF with both guards; CRC32,
  // CRC32C and CRC64_XP10 (transport/block_signature.h).
  return SigCaps{(1u << 0) | (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4), (1u << sig::kTypeT10Dif) | (1u << sig::kTypeCrc),
                 (1u << sig::kBgCrc) | (1u << sig::kBgCsum),
                 (1u << sig::kCrc32) | (1u << sig::kCrc32c) | (1u << sig::kCrc64Xp10)};
}

}  // namespace softverbs::core
