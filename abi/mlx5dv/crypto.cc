// mlx5dv crypto, DEK and mkeys. Crypto, DEKs and signature checks need an mlx5 crypto or
// signature engine that softverbs0 does not model, so they refuse with EOPNOTSUPP; indirect mkeys
// are implemented in libibverbs (provider.h, mkey_ops.cc).
#include "abi/mlx5dv/provider.h"
#include "abi/mlx5dv/refuse.h"

// --- crypto login (mlx5dv_crypto_login(3), mlx5dv_crypto_login_create(3)) -----------------------
// "returns 0 on success and errno value on error"; create: "On error NULL is returned and errno
// is set".

SV_MLX5_ERRNO(mlx5dv_crypto_login, struct ibv_context*, struct mlx5dv_crypto_login_attr*)
SV_MLX5_ERRNO(mlx5dv_crypto_login_query_state, struct ibv_context*,
              enum mlx5dv_crypto_login_state*)
SV_MLX5_ERRNO(mlx5dv_crypto_logout, struct ibv_context*)

SV_MLX5_NULL(mlx5dv_crypto_login_create, struct mlx5dv_crypto_login_obj, struct ibv_context*,
             struct mlx5dv_crypto_login_attr_ex*)
SV_MLX5_ERRNO(mlx5dv_crypto_login_query, struct mlx5dv_crypto_login_obj*,
              struct mlx5dv_crypto_login_query_attr*)
SV_MLX5_ERRNO(mlx5dv_crypto_login_destroy, struct mlx5dv_crypto_login_obj*)

// --- data encryption keys (mlx5dv_dek_create(3)) -------------------------------------------------
// create: "On error NULL is returned and errno is set"; query/destroy: "errno value on error".

SV_MLX5_NULL(mlx5dv_dek_create, struct mlx5dv_dek, struct ibv_context*,
             struct mlx5dv_dek_init_attr*)
SV_MLX5_ERRNO(mlx5dv_dek_query, struct mlx5dv_dek*, struct mlx5dv_dek_attr*)
SV_MLX5_ERRNO(mlx5dv_dek_destroy, struct mlx5dv_dek*)

// --- mkeys (mlx5dv_create_mkey(3), mlx5dv_mkey_check(3)) -----------------------------------------
// create: "on error NULL will be returned and errno will be set"; "Upon success destroy 0 is
// returned or the value of errno on a failure". mlx5dv_mkey_check(3) is an inline wrapper of
// _mlx5dv_mkey_check: "0 on success or the value of errno on failure".

// support: mlx5dv_create_mkey | implemented | MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT only (configured by mlx5dv_wr_mr_list/_interleaved); no DEVX context needed
SV_EXPORT struct mlx5dv_mkey* mlx5dv_create_mkey(struct mlx5dv_mkey_init_attr* mkey_init_attr) {
  return sv_private_mlx5_provider()->create_mkey(mkey_init_attr);
}
// support: mlx5dv_destroy_mkey | implemented | waits for accesses in flight through the mkey
SV_EXPORT int mlx5dv_destroy_mkey(struct mlx5dv_mkey* mkey) { return sv_private_mlx5_provider()->destroy_mkey(mkey); }
SV_MLX5_ERRNO(_mlx5dv_mkey_check, struct mlx5dv_mkey*, struct mlx5dv_mkey_err*, size_t)
