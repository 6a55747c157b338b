// IBVERBS_1.0: the 2006 ABI, whose structs (ibv_device_1_0, ibv_qp_1_0, ...) wrap the current
// ones. Binaries linked against it are not supported: each of these symbols exists so the
// dynamic linker resolves them, and fails with EOPNOTSUPP (docs/support-matrix.md).
// Programs built against any libibverbs since 1.1 bind the default @@IBVERBS_1.1 versions.
#include <cerrno>
#include <cstdint>

#include "abi/common/errno_convention.h"

namespace {

softverbs::Status Legacy() { return softverbs::abi::Unsupported("the IBVERBS_1.0 compatibility ABI"); }

}  // namespace

// Each legacy entry point: a local function bound to name@IBVERBS_1.0 by .symver.
#define SV_COMPAT_PTR(name)                                                                     \
  extern "C" __attribute__((visibility("default"))) void* sv_compat_##name() {                 \
    return softverbs::abi::ReturnNull(#name "@IBVERBS_1.0", "", Legacy());                     \
  }                                                                                             \
  __asm__(".symver sv_compat_" #name "," #name "@IBVERBS_1.0");
#define SV_COMPAT_INT(name)                                                                     \
  extern "C" __attribute__((visibility("default"))) int sv_compat_##name() {                   \
    return softverbs::abi::ReturnMinusOne(#name "@IBVERBS_1.0", "", Legacy());                 \
  }                                                                                             \
  __asm__(".symver sv_compat_" #name "," #name "@IBVERBS_1.0");
#define SV_COMPAT_VOID(name)                                                                    \
  extern "C" __attribute__((visibility("default"))) void sv_compat_##name() {                  \
    softverbs::abi::LogRefusal(#name "@IBVERBS_1.0", "", Legacy());                            \
  }                                                                                             \
  __asm__(".symver sv_compat_" #name "," #name "@IBVERBS_1.0");

SV_COMPAT_PTR(ibv_get_device_list)
SV_COMPAT_VOID(ibv_free_device_list)
SV_COMPAT_PTR(ibv_get_device_name)
SV_COMPAT_INT(ibv_get_device_guid)
SV_COMPAT_PTR(ibv_open_device)
SV_COMPAT_INT(ibv_close_device)
SV_COMPAT_INT(ibv_get_async_event)
SV_COMPAT_VOID(ibv_ack_async_event)
SV_COMPAT_INT(ibv_query_device)
SV_COMPAT_INT(ibv_query_port)
SV_COMPAT_INT(ibv_query_gid)
SV_COMPAT_INT(ibv_query_pkey)
SV_COMPAT_PTR(ibv_alloc_pd)
SV_COMPAT_INT(ibv_dealloc_pd)
SV_COMPAT_PTR(ibv_reg_mr)
SV_COMPAT_INT(ibv_dereg_mr)
SV_COMPAT_PTR(ibv_create_cq)
SV_COMPAT_INT(ibv_resize_cq)
SV_COMPAT_INT(ibv_destroy_cq)
SV_COMPAT_INT(ibv_get_cq_event)
SV_COMPAT_VOID(ibv_ack_cq_events)
SV_COMPAT_PTR(ibv_create_srq)
SV_COMPAT_INT(ibv_modify_srq)
SV_COMPAT_INT(ibv_query_srq)
SV_COMPAT_INT(ibv_destroy_srq)
SV_COMPAT_PTR(ibv_create_qp)
SV_COMPAT_INT(ibv_query_qp)
SV_COMPAT_INT(ibv_modify_qp)
SV_COMPAT_INT(ibv_destroy_qp)
SV_COMPAT_PTR(ibv_create_ah)
SV_COMPAT_INT(ibv_destroy_ah)
SV_COMPAT_INT(ibv_attach_mcast)
SV_COMPAT_INT(ibv_detach_mcast)
