// mlx5dv device-level entry points: identity, queries, contexts, device memory, VAR/UAR-like
// resources, packet pacing, scheduling elements and VFIO. mlx5dv_is_supported, _open_device and
// _query_device answer for softverbs0 (through libibverbs, provider.h); device memory, VAR,
// packet pacing, scheduling and VFIO have no softverbs counterpart and refuse with EOPNOTSUPP.
#include <cerrno>
#include <type_traits>

#include "abi/common/errno_convention.h"
#include "abi/mlx5dv/provider.h"
#include "abi/mlx5dv/refuse.h"
#include "base/log.h"

// --- identity -------------------------------------------------------------------------------

// mlx5dv_is_supported(3): "Returns true if device is implemented by mlx5 provider". True only
// under softverbs0's mlx5 identity (SOFTVERBS_MLX5_IDENTITY=1, docs/device.md), for software
// that enables DC only on mlx5 devices; the mlx5dv verbs work on softverbs0 either way.
// support: mlx5dv_is_supported | implemented | true only with SOFTVERBS_MLX5_IDENTITY=1
SV_EXPORT bool mlx5dv_is_supported(struct ibv_device* device) {
  const bool yes = sv_private_mlx5_provider()->is_supported(device);
  SV_LOG(kDebug, "mlx5dv_is_supported: %s", yes ? "true (SOFTVERBS_MLX5_IDENTITY=1)" : "false (softverbs' own identity)");
  return yes;
}

// mlx5dv_open_device(3): "a pointer to the allocated device context, or NULL". Without DEVX an
// mlx5dv context is an ordinary verbs context.
// support: mlx5dv_open_device | implemented | ibv_open_device; MLX5DV_CONTEXT_FLAGS_DEVX refused with EOPNOTSUPP
SV_EXPORT struct ibv_context* mlx5dv_open_device(struct ibv_device* device, struct mlx5dv_context_attr* attr) {
  using namespace softverbs;
  const std::string object = device ? device->name : "device NULL";
  if (attr != nullptr && (attr->flags & MLX5DV_CONTEXT_FLAGS_DEVX))
    return abi::ReturnNull<ibv_context>("mlx5dv_open_device", object,
                                        NotSupported("MLX5DV_CONTEXT_FLAGS_DEVX: DEVX (raw mlx5 firmware commands) is not emulated"));
  if (attr != nullptr && ((attr->flags & ~MLX5DV_CONTEXT_FLAGS_DEVX) || attr->comp_mask != 0))
    return abi::ReturnNull<ibv_context>("mlx5dv_open_device", object,
                                        Invalid("mlx5dv_context_attr has unknown flags or comp_mask bits"));
  return ibv_open_device(device);
}

// mlx5dv_query_device(3): "0 on success or the value of errno on failure".
// support: mlx5dv_query_device | implemented | honest caps: DC via mlx5dv_create_qp, DCI streams (max_log_num_concurent 16, max_log_num_errored 16), tunnel offloads VXLAN (raw packet QPs), no other offloads
SV_EXPORT int mlx5dv_query_device(struct ibv_context* context, struct mlx5dv_context* attrs) {
  return sv_private_mlx5_provider()->query_device(context, attrs);
}

// mlx5dv_query_port(3) is an inline wrapper of this: "the value of errno on failure".
SV_MLX5_ERRNO(_mlx5dv_query_port, struct ibv_context*, uint32_t, struct mlx5_ib_uapi_query_port*,
              size_t)

// Header comment: "Returns 0 on success, or the value of errno on failure".
SV_MLX5_ERRNO(mlx5dv_set_context_attr, struct ibv_context*, enum mlx5dv_set_ctx_attr_type, void*)

// mlx5dv_get_clock_info(3): "0 on success or the value of errno on failure".
SV_MLX5_ERRNO(mlx5dv_get_clock_info, struct ibv_context*, struct mlx5dv_clock_info*)

// --- mlx5dv_init_obj: two versions ------------------------------------------------------------
//
// mlx5dv_init_obj exposes a QP's / CQ's / SRQ's mlx5 hardware queues (WQE buffers, doorbell
// records, UAR pages) for software that writes WQEs itself. softverbs' queues are not mlx5
// queues, so there is nothing meaningful to expose: EOPNOTSUPP.
//
// rdma-core exports mlx5dv_init_obj twice: the default MLX5_1.2 and a compat MLX5_1.0 kept for
// programs linked before 1.2 (their CQ output differs). Both versions must exist or such
// programs fail to load. mlx5dv_init_obj(3): "0 on success or the value of errno on failure".
// The implementations carry private names, bound to the versioned public name with .symver;
// the version script then hides the private names.

SV_EXPORT int sv_mlx5dv_init_obj_1_2(struct mlx5dv_obj*, uint64_t) {
  return softverbs::abi::RefuseErrno("mlx5dv_init_obj");
}
SV_EXPORT int sv_mlx5dv_init_obj_1_0(struct mlx5dv_obj*, uint64_t) {
  return softverbs::abi::RefuseErrno("mlx5dv_init_obj");
}
__asm__(".symver sv_mlx5dv_init_obj_1_2, mlx5dv_init_obj@@MLX5_1.2");
__asm__(".symver sv_mlx5dv_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");

// The .symver aliases bypass the compiler's prototype check; do it here instead.
static_assert(std::is_same_v<decltype(&mlx5dv_init_obj), decltype(&sv_mlx5dv_init_obj_1_2)>);
static_assert(std::is_same_v<decltype(&mlx5dv_init_obj), decltype(&sv_mlx5dv_init_obj_1_0)>);

// support: mlx5dv_init_obj@MLX5_1.2 | EOPNOTSUPP | returns EOPNOTSUPP (mlx5dv_init_obj(3))
// support: mlx5dv_init_obj@MLX5_1.0 | EOPNOTSUPP | compat (linked before 1.2); returns EOPNOTSUPP

// --- device memory, VAR, packet pacing ----------------------------------------------------------

// mlx5dv_alloc_dm(3): "on error NULL will be returned and errno will be set".
SV_MLX5_NULL(mlx5dv_alloc_dm, struct ibv_dm, struct ibv_context*, struct ibv_alloc_dm_attr*,
             struct mlx5dv_alloc_dm_attr*)

// mlx5dv_dm_map_op_addr(3): "on error NULL will be returned and errno will be set".
SV_MLX5_NULL(mlx5dv_dm_map_op_addr, void, struct ibv_dm*, uint8_t)

// mlx5dv_alloc_var(3): "on error NULL will be returned and errno will be set".
SV_MLX5_NULL(mlx5dv_alloc_var, struct mlx5dv_var, struct ibv_context*, uint32_t)
SV_MLX5_VOID(mlx5dv_free_var, struct mlx5dv_var*)

// mlx5dv_pp_alloc(3): "on error NULL will be returned and errno will be set".
SV_MLX5_NULL(mlx5dv_pp_alloc, struct mlx5dv_pp, struct ibv_context*, size_t, const void*, uint32_t)
SV_MLX5_VOID(mlx5dv_pp_free, struct mlx5dv_pp*)

// --- scheduling elements (mlx5dv_sched_node_create(3)) -------------------------------------------
// "on error NULL will be returned and errno will be set"; "modify and destroy, 0 is returned or
// the value of errno on a failure".

SV_MLX5_NULL(mlx5dv_sched_node_create, struct mlx5dv_sched_node, struct ibv_context*,
             const struct mlx5dv_sched_attr*)
SV_MLX5_ERRNO(mlx5dv_sched_node_modify, struct mlx5dv_sched_node*, const struct mlx5dv_sched_attr*)
SV_MLX5_ERRNO(mlx5dv_sched_node_destroy, struct mlx5dv_sched_node*)
SV_MLX5_NULL(mlx5dv_sched_leaf_create, struct mlx5dv_sched_leaf, struct ibv_context*,
             const struct mlx5dv_sched_attr*)
SV_MLX5_ERRNO(mlx5dv_sched_leaf_modify, struct mlx5dv_sched_leaf*, const struct mlx5dv_sched_attr*)
SV_MLX5_ERRNO(mlx5dv_sched_leaf_destroy, struct mlx5dv_sched_leaf*)

// --- VFIO (a user-space mlx5 driver over vfio-pci; there is no PCI device here) -----------------

// mlx5dv_get_vfio_device_list(3): "sets errno and returns NULL if the request fails".
SV_MLX5_NULL(mlx5dv_get_vfio_device_list, struct ibv_device*, struct mlx5dv_vfio_context_attr*)

// mlx5dv_vfio_get_events_fd(3) returns an fd and documents no failure; an fd-returning call
// fails with -1 and errno, as rdma-core does for a context that is not VFIO.
SV_MLX5_MINUS_ONE(mlx5dv_vfio_get_events_fd, int, struct ibv_context*)

// mlx5dv_vfio_process_events(3): "0 upon success or errno value in case a failure".
SV_MLX5_ERRNO(mlx5dv_vfio_process_events, struct ibv_context*)
