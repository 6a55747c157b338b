// libefa.so.1: the six efadv_* entry points. softverbs0 is never an EFA device, so each one
// refuses with EOPNOTSUPP through the convention its man page gives. The library exists because
// pyverbs (pyverbs.providers.efa) links it and must load.
#include <infiniband/efadv.h>

#include <cerrno>

#include "abi/common/errno_convention.h"

#include "abi/common/export.h"

namespace softverbs::abi {
namespace {

constexpr const char* kNotEfa = "softverbs0 is not an EFA device";

// These never throw: they are the bodies of C entry points. A failed allocation of the rule text
// only loses the log line; the caller still gets the convention.
void* RefuseNull(const char* verb) noexcept {
  try {
    return ReturnNull(verb, {}, NotSupported(kNotEfa));
  } catch (...) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
}

int RefuseErrno(const char* verb) noexcept {
  try {
    return ReturnErrno(verb, {}, NotSupported(kNotEfa));
  } catch (...) {
    return EOPNOTSUPP;
  }
}

}  // namespace
}  // namespace softverbs::abi

using softverbs::abi::RefuseErrno;
using softverbs::abi::RefuseNull;

// support: efadv_create_driver_qp | EOPNOTSUPP | NULL + errno (efadv_create_driver_qp(3))
SV_EXPORT struct ibv_qp* efadv_create_driver_qp(struct ibv_pd*, struct ibv_qp_init_attr*,
                                                uint32_t) {
  return static_cast<struct ibv_qp*>(RefuseNull("efadv_create_driver_qp"));
}

// support: efadv_create_qp_ex | EOPNOTSUPP | NULL + errno (efadv_create_qp_ex(3))
SV_EXPORT struct ibv_qp* efadv_create_qp_ex(struct ibv_context*, struct ibv_qp_init_attr_ex*,
                                            struct efadv_qp_init_attr*, uint32_t) {
  return static_cast<struct ibv_qp*>(RefuseNull("efadv_create_qp_ex"));
}

// support: efadv_query_device | EOPNOTSUPP | returns EOPNOTSUPP (efadv_query_device(3))
SV_EXPORT int efadv_query_device(struct ibv_context*, struct efadv_device_attr*, uint32_t) {
  return RefuseErrno("efadv_query_device");
}

// support: efadv_query_ah | EOPNOTSUPP | returns EOPNOTSUPP (efadv_query_ah(3))
SV_EXPORT int efadv_query_ah(struct ibv_ah*, struct efadv_ah_attr*, uint32_t) {
  return RefuseErrno("efadv_query_ah");
}

// No man page; a constructor, so NULL + errno like efadv_create_qp_ex(3).
// support: efadv_create_cq | EOPNOTSUPP | NULL + errno (a constructor; no man page)
SV_EXPORT struct ibv_cq_ex* efadv_create_cq(struct ibv_context*, struct ibv_cq_init_attr_ex*,
                                            struct efadv_cq_init_attr*, uint32_t) {
  return static_cast<struct ibv_cq_ex*>(RefuseNull("efadv_create_cq"));
}

// rdma-core returns NULL for a CQ that is not an EFA CQ; no CQ of ours ever is. errno is set too.
// support: efadv_cq_from_ibv_cq_ex | EOPNOTSUPP | NULL, errno EOPNOTSUPP: no CQ here is an EFA CQ
SV_EXPORT struct efadv_cq* efadv_cq_from_ibv_cq_ex(struct ibv_cq_ex*) {
  return static_cast<struct efadv_cq*>(RefuseNull("efadv_cq_from_ibv_cq_ex"));
}
