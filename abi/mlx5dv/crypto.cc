// mlx5dv crypto login and DEKs. They need an mlx5 crypto engine that softverbs0 does not model,
// so every one refuses with EOPNOTSUPP. (Mkeys: mkey.cc.)
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
