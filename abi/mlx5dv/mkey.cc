// mlx5dv mkeys in libmlx5.so.1: indirect (and signature) mkeys and their check are implemented in libibverbs
// (provider.h, mkey_ops.cc).
#include "abi/mlx5dv/provider.h"
#include "abi/mlx5dv/refuse.h"

// --- mkeys (mlx5dv_create_mkey(3), mlx5dv_mkey_check(3)) -----------------------------------------
// create: "on error NULL will be returned and errno will be set"; "Upon success destroy 0 is
// returned or the value of errno on a failure". mlx5dv_mkey_check(3) is an inline wrapper of
// _mlx5dv_mkey_check: "0 on success or the value of errno on failure".

// support: mlx5dv_create_mkey | implemented | MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT (configured by mlx5dv_wr_mr_list/_interleaved or mlx5dv_wr_mkey_configure), with BLOCK_SIGNATURE (CRC32/CRC32C/T10-DIF computed on every access, docs/data-path.md); CRYPTO/UPDATE_TAG/REMOTE_INVALIDATE refused with EOPNOTSUPP; no DEVX context needed
SV_EXPORT struct mlx5dv_mkey* mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr* mkey_init_attr) {
  return sv_private_mlx5_provider()->create_mkey(mkey_init_attr);
}
// support: mlx5dv_destroy_mkey | implemented | waits for accesses in flight through the mkey
SV_EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey* mkey) { return sv_private_mlx5_provider()->destroy_mkey(mkey); }
// support: _mlx5dv_mkey_check | implemented | the first guard/app tag/ref tag error (actual, expected, offset) since the last check, cleared; EINVAL for an mkey without BLOCK_SIGNATURE, as mlx5
SV_EXPORT int _mlx5dv_mkey_check(struct mlx5dv_mkey* mkey, struct mlx5dv_mkey_err* err_info, size_t err_info_size) {
  return sv_private_mlx5_provider()->mkey_check(mkey, err_info, err_info_size);
}
