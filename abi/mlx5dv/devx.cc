// mlx5dv DEVX entry points: raw firmware commands to an mlx5 device (objects, UMEMs, UARs, EQs,
// events, async completions). softverbs0 has no mlx5 firmware to talk to, so these refuse with
// EOPNOTSUPP; DEVX will not be emulated (its command layouts are the PRM's, not the verbs').
#include "abi/mlx5dv/refuse.h"

// mlx5dv_devx_obj_create(3): "on error NULL will be returned and errno will be set"; "query,
// modify, destroy, general commands, 0 is returned or the value of errno on a failure".
SV_MLX5_NULL(mlx5dv_devx_obj_create, struct mlx5dv_devx_obj, struct ibv_context*, const void*,
             size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_obj_query, struct mlx5dv_devx_obj*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_obj_modify, struct mlx5dv_devx_obj*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_obj_destroy, struct mlx5dv_devx_obj*)
SV_MLX5_ERRNO(mlx5dv_devx_general_cmd, struct ibv_context*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_obj_query_async, struct mlx5dv_devx_obj*, const void*, size_t, size_t,
              uint64_t, struct mlx5dv_devx_cmd_comp*)

// mlx5dv_devx_qp_query(3) and siblings: "0 is returned or the value of errno on a failure".
SV_MLX5_ERRNO(mlx5dv_devx_qp_query, struct ibv_qp*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_qp_modify, struct ibv_qp*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_cq_query, struct ibv_cq*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_cq_modify, struct ibv_cq*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_srq_query, struct ibv_srq*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_srq_modify, struct ibv_srq*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_wq_query, struct ibv_wq*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_wq_modify, struct ibv_wq*, const void*, size_t, void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_ind_tbl_query, struct ibv_rwq_ind_table*, const void*, size_t, void*,
              size_t)
SV_MLX5_ERRNO(mlx5dv_devx_ind_tbl_modify, struct ibv_rwq_ind_table*, const void*, size_t, void*,
              size_t)

// mlx5dv_devx_query_eqn(3): "the value of errno on failure".
SV_MLX5_ERRNO(mlx5dv_devx_query_eqn, struct ibv_context*, uint32_t, uint32_t*)

// mlx5dv_devx_umem_reg(3): "on error NULL will be returned and errno will be set";
// "mlx5dv_devx_umem_dereg returns 0 on success, or the value of errno on failure".
SV_MLX5_NULL(mlx5dv_devx_umem_reg, struct mlx5dv_devx_umem, struct ibv_context*, void*, size_t,
             uint32_t)
SV_MLX5_NULL(mlx5dv_devx_umem_reg_ex, struct mlx5dv_devx_umem, struct ibv_context*,
             struct mlx5dv_devx_umem_in*)
SV_MLX5_ERRNO(mlx5dv_devx_umem_dereg, struct mlx5dv_devx_umem*)

// mlx5dv_devx_alloc_uar(3): "on error NULL will be returned and errno will be set".
SV_MLX5_NULL(mlx5dv_devx_alloc_uar, struct mlx5dv_devx_uar, struct ibv_context*, uint32_t)
SV_MLX5_VOID(mlx5dv_devx_free_uar, struct mlx5dv_devx_uar*)

// mlx5dv_devx_alloc_msi_vector(3): NULL + errno; free "on error errno will be returned".
SV_MLX5_NULL(mlx5dv_devx_alloc_msi_vector, struct mlx5dv_devx_msi_vector, struct ibv_context*)
SV_MLX5_ERRNO(mlx5dv_devx_free_msi_vector, struct mlx5dv_devx_msi_vector*)

// mlx5dv_devx_create_eq(3): NULL + errno; destroy "on error errno will be returned".
SV_MLX5_NULL(mlx5dv_devx_create_eq, struct mlx5dv_devx_eq, struct ibv_context*, const void*, size_t,
             void*, size_t)
SV_MLX5_ERRNO(mlx5dv_devx_destroy_eq, struct mlx5dv_devx_eq*)

// mlx5dv_devx_create_cmd_comp(3): NULL + errno; "mlx5dv_devx_get_async_cmd_comp will return 0,
// otherwise errno will be returned".
SV_MLX5_NULL(mlx5dv_devx_create_cmd_comp, struct mlx5dv_devx_cmd_comp, struct ibv_context*)
SV_MLX5_VOID(mlx5dv_devx_destroy_cmd_comp, struct mlx5dv_devx_cmd_comp*)
SV_MLX5_ERRNO(mlx5dv_devx_get_async_cmd_comp, struct mlx5dv_devx_cmd_comp*,
              struct mlx5_ib_uapi_devx_async_cmd_hdr*, size_t)

// mlx5dv_devx_create_event_channel(3): "on error NULL will be returned and errno will be set".
SV_MLX5_NULL(mlx5dv_devx_create_event_channel, struct mlx5dv_devx_event_channel,
             struct ibv_context*, enum mlx5_ib_uapi_devx_create_event_channel_flags)
SV_MLX5_VOID(mlx5dv_devx_destroy_event_channel, struct mlx5dv_devx_event_channel*)

// mlx5dv_devx_subscribe_devx_event(3) states no return value; rdma-core returns 0 or the errno
// value, like the other DEVX commands.
SV_MLX5_ERRNO(mlx5dv_devx_subscribe_devx_event, struct mlx5dv_devx_event_channel*,
              struct mlx5dv_devx_obj*, uint16_t, uint16_t[], uint64_t)
SV_MLX5_ERRNO(mlx5dv_devx_subscribe_devx_event_fd, struct mlx5dv_devx_event_channel*, int,
              struct mlx5dv_devx_obj*, uint16_t)

// mlx5dv_devx_get_event(3): "the number of bytes read, otherwise -1 will be returned and errno
// was set".
SV_MLX5_MINUS_ONE(mlx5dv_devx_get_event, ssize_t, struct mlx5dv_devx_event_channel*,
                  struct mlx5_ib_uapi_devx_async_event_hdr*, size_t)
