// Block signatures of mlx5 signature mkeys (mlx5dv_wr_set_mkey_sig_block(3)), computed in
// software: the per-block CRCs and T10-DIF tuples, and the conversion of a byte stream from one
// signature domain to another (check the input's fields, strip them, generate the output's).
//
// mlx5dv_wr_set_mkey_sig_block(3): "depending on the actual operation that happens (TX or RX),
// the device will do the 'right thing' based on the signature configurations of the two
// domains" -- memory to wire on a gather, wire to memory on a scatter. Each data block of
// `block_size` bytes is followed, in a domain with a signature, by its field: 4 bytes of CRC32 /
// CRC32C, 8 bytes of CRC64_XP10 or of T10-DIF (guard, application tag, reference tag; T10
// SBC-3), all big-endian (the byte table of check_mask in mlx5dv_wr_set_mkey_sig_block(3)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace softverbs::transport {

// CRC-32 of FC-PH / IEEE 802.3 (reflected, polynomial 0x04C11DB7) with initial register `seed`
// and the final inversion: seed 0xFFFFFFFF gives the standard value (check "123456789" =
// 0xCBF43926).
uint32_t SigCrc32(uint32_t seed, const uint8_t* data, size_t n);
// CRC-32C (Castagnoli, RFC 3720 B.4; reflected, polynomial 0x1EDC6F41), same conventions
// (check 0xE3069283).
uint32_t SigCrc32c(uint32_t seed, const uint8_t* data, size_t n);
// CRC64_XP10, "a 64-bit CRC defined in Microsoft XP10 compression standard"
// (mlx5dv_wr_set_mkey_sig_block(3)). Microsoft's XP10 reference design (Project Zipline,
// rtl/common/include/cr_global_params.vh XP10CRC64_POLYNOMIAL / _INIT and the cr_crc module)
// defines it: reflected polynomial 0x9A6C9329AC4BC9B5 (0xAD93D23594C93659 normal), initial
// register all ones, final inversion -- the CRC-64/NVME (Rocksoft) parameters, check
// "123456789" = 0xAE8B14860A799888. Same conventions as above: `seed` is the initial register.
uint64_t SigCrc64Xp10(uint64_t seed, const uint8_t* data, size_t n);
// The T10-DIF guard CRC (T10 SBC-3 4.22.4.2: polynomial 0x8BB7, not reflected, no final
// inversion) from initial register `seed` (check with seed 0: 0xD0DB).
uint16_t SigCrc16T10Dif(uint16_t seed, const uint8_t* data, size_t n);
// The IP checksum guard (RFC 1071: ones' complement of the ones' complement sum of the
// big-endian 16-bit words; an odd last byte is padded with zero), the sum starting at `seed`.
uint16_t SigIpChecksum(uint16_t seed, const uint8_t* data, size_t n);

enum class SigKind : uint8_t { kNone, kCrc32, kCrc32c, kT10Dif, kCrc64Xp10 };
enum class GuardKind : uint8_t { kCrc, kIpChecksum };

// One domain of mlx5dv_sig_block_attr (mem or wire).
struct SigDomain {
  SigKind kind = SigKind::kNone;
  uint32_t block_size = 512;  // data bytes per block (enum mlx5dv_block_size)
  uint64_t seed = 0;          // CRC: the initial register; T10-DIF: the guard's (bg)
  GuardKind guard = GuardKind::kCrc;
  uint16_t app_tag = 0;
  uint32_t ref_tag = 0;       // of the first block
  bool ref_increments = false;  // MLX5DV_SIG_T10DIF_FLAG_REF_REMAP: +1 per block
  bool app_escape = false;      // MLX5DV_SIG_T10DIF_FLAG_APP_ESCAPE: app tag 0xFFFF checks nothing
  bool app_ref_escape = false;  // MLX5DV_SIG_T10DIF_FLAG_APP_REF_ESCAPE: 0xFFFF and 0xFFFFFFFF
};

// Bytes of a domain's field after each block: 0, 4 or 8.
size_t SigFieldBytes(const SigDomain& d);

// The first integrity error of a conversion (mlx5dv_mkey_check(3), struct mlx5dv_sig_err), in
// the man page's order of precedence within one block: guard, application tag, reference tag.
enum class SigErrorKind : uint8_t { kNone, kGuard, kRefTag, kAppTag };
struct SigError {
  SigErrorKind kind = SigErrorKind::kNone;
  uint64_t actual = 0;    // computed from the data (guard) or the expected tag's field
  uint64_t expected = 0;  // what the signature field holds / the configured tag
  uint64_t offset = 0;    // byte offset, in the input stream, of the failing block
};

// The field domain `d` writes after its block `index` whose data (block_size bytes) is `data`.
void SigGenerate(const SigDomain& d, uint64_t index, const uint8_t* data, uint8_t* field);
// Checks `field`, the field of block `index` whose data is `data` (that block starting at byte
// `offset` of the stream), on the bytes `check_mask` selects: the first failed check, or kNone.
SigError SigCheck(const SigDomain& d, uint8_t check_mask, uint64_t index, uint64_t offset, const uint8_t* data,
                  const uint8_t* field);

// Converts whole blocks of `in` (laid out as domain `from`) into `out` (laid out as domain
// `to`; both domains use the same block_size when both carry a signature, as mlx5 requires for
// a conversion). Each input field is checked on the bytes `check_mask` selects (the table of
// mlx5dv_wr_set_mkey_sig_block(3): bit 7 is the field's first byte); the output field is
// generated. Returns false (writing nothing) when `n` is not a whole number of input blocks or
// the block sizes differ; `*error` receives the first failed check, and the data still moves
// (mlx5dv_mkey_check(3): "the transfer operation itself may be completed successfully").
bool SigConvert(const SigDomain& from, const SigDomain& to, uint8_t check_mask, const uint8_t* in, size_t n,
                std::vector<uint8_t>* out, SigError* error);

}  // namespace softverbs::transport
