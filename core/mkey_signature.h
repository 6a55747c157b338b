// The rules of mlx5dv_wr_set_mkey_sig_block(3): which signature a BLOCK_SIGNATURE mkey takes,
// decided as mlx5 decides them (providers/mlx5/qp.c, mlx5_send_wr_set_mkey_sig_block and
// mlx5_umr_fill_sig_bsf), turned into the transport's configuration (transport/signature_key.h).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "transport/signature_key.h"

namespace softverbs::core {

// The values of enum mlx5dv_sig_type, mlx5dv_sig_crc_type, mlx5dv_sig_t10dif_bg_type,
// mlx5dv_sig_t10dif_flags, mlx5dv_block_size and mlx5dv_sig_block_attr_flags (abi/ checks them
// against mlx5dv.h).
namespace sig {
inline constexpr uint32_t kTypeT10Dif = 0, kTypeCrc = 1;
inline constexpr uint32_t kCrc32 = 0, kCrc32c = 1, kCrc64Xp10 = 2;
inline constexpr uint32_t kBgCrc = 0, kBgCsum = 1;
inline constexpr uint16_t kRefRemap = 1, kAppEscape = 2, kAppRefEscape = 4;
inline constexpr uint32_t kBlock512 = 0, kBlock4160 = 4;
inline constexpr uint32_t kAttrCopyMask = 1;
}  // namespace sig

// One domain of struct mlx5dv_sig_block_attr as the application wrote it.
struct SigDomainSpec {
  bool present = false;  // the attr's pointer was not NULL
  uint32_t type = 0;     // sig::kType*
  uint32_t block_size = 0;  // enum mlx5dv_block_size
  uint64_t comp_mask = 0;
  uint32_t crc_type = 0;  // CRC
  uint64_t seed = 0;
  uint32_t bg_type = 0;   // T10-DIF
  uint16_t bg = 0;
  uint16_t app_tag = 0;
  uint32_t ref_tag = 0;
  uint16_t flags = 0;
};

struct SigBlockSpec {
  SigDomainSpec mem;
  SigDomainSpec wire;
  uint32_t flags = 0;
  uint8_t check_mask = 0;
  uint8_t copy_mask = 0;
  uint64_t comp_mask = 0;
};

// The bytes of enum mlx5dv_block_size `v`, or 0 if it names none.
uint32_t SigBlockBytes(uint32_t v);

// Checks `spec` and returns the signature the UMR sets: EINVAL where mlx5 refuses, EOPNOTSUPP
// where softverbs does not compute what was asked (two block sizes).
Result<transport::SigConfig> SigConfigOf(const SigBlockSpec& spec);

// The block sizes, protections and CRC types sig_caps announces (mlx5dv_query_device(3)): the
// bit masks of enum mlx5dv_block_size_caps, mlx5dv_sig_prot_caps, mlx5dv_sig_t10dif_bg_caps and
// mlx5dv_sig_crc_type_caps.
struct SigCaps {
  uint64_t block_size;
  uint32_t block_prot;
  uint16_t t10dif_bg;
  uint16_t crc_type;
};
SigCaps SignatureCaps();

}  // namespace softverbs::core
