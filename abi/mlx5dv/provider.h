// The bridge from libmlx5.so.1 to the verbs objects in libibverbs.so.1.
//
// In rdma-core the mlx5 provider lives inside libmlx5 and libibverbs loads it. In softverbs the
// device, its objects and the core live in libibverbs.so.1 (one copy of the core per process),
// so the mlx5dv entry points that act on those objects are implemented there (provider.cc,
// dv_qp_ex.cc, compiled into sv_ibverbs) and libmlx5's exported functions call them through
// this table. libibverbs exports the table under the private version SOFTVERBS_PRIVATE_1; both
// libraries come from one build, so the layout is shared.
#pragma once

#include <infiniband/mlx5dv.h>

#include <cstdint>

struct SvMlx5Provider {
  uint32_t size;  // sizeof(SvMlx5Provider) of the libibverbs that filled it
  bool (*is_supported)(struct ibv_device* device);
  int (*query_device)(struct ibv_context* context, struct mlx5dv_context* attrs);
  struct ibv_qp* (*create_qp)(struct ibv_context* context, struct ibv_qp_init_attr_ex* qp_attr,
                              struct mlx5dv_qp_init_attr* mlx5_qp_attr);
  struct mlx5dv_qp_ex* (*qp_ex_from_ibv_qp_ex)(struct ibv_qp_ex* qp);
  struct mlx5dv_mkey* (*create_mkey)(struct mlx5dv_mkey_init_attr* mkey_init_attr);
  int (*destroy_mkey)(struct mlx5dv_mkey* mkey);
  int (*mkey_check)(struct mlx5dv_mkey* mkey, struct mlx5dv_mkey_err* err_info, size_t err_info_size);
  int (*dci_stream_id_reset)(struct ibv_qp* qp, uint16_t stream_id);
  int (*map_ah_to_qp)(struct ibv_ah* ah, uint32_t qp_num);
  int (*cancel_posted_send_wrs)(struct mlx5dv_qp_ex* mqp, uint64_t wr_id);
};

extern "C" const SvMlx5Provider* sv_private_mlx5_provider(void);

namespace softverbs::abi {
// The ops of an mlx5dv_qp_ex (dv_qp_ex.cc).
void InitDvQpEx(struct SvQp* qp);
// mlx5dv_create_mkey / mlx5dv_destroy_mkey (mkey_ops.cc).
struct mlx5dv_mkey* CreateMkey(struct mlx5dv_mkey_init_attr* attr);
int DestroyMkey(struct mlx5dv_mkey* mkey);
int MkeyCheck(struct mlx5dv_mkey* mkey, struct mlx5dv_mkey_err* err_info, size_t err_info_size);
}  // namespace softverbs::abi
