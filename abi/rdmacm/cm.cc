// librdmacm's rdma_* entry points. The connection manager itself is a later issue: until then
// every verb refuses with EOPNOTSUPP through its man page's convention. rdma_event_str is real,
// and the release functions are safe on what a caller can hand them today.
#include <cerrno>

#include "abi/common/errno_convention.h"
#include "abi/rdmacm/refuse.h"

namespace softverbs::abi::rdmacm {
namespace {

// Release functions can only receive objects softverbs never created (every constructor above
// refuses), so they refuse too instead of freeing foreign memory.
Status NotOurs(const char* what) noexcept {
  try {
    return Invalid(std::string(what) + " was not returned by softverbs");
  } catch (...) {
    return Status(EINVAL, {});
  }
}

}  // namespace
}  // namespace softverbs::abi::rdmacm

namespace rdmacm = softverbs::abi::rdmacm;
using softverbs::abi::LogRefusal;
using softverbs::abi::ReturnMinusOne;

// --- event channel and events -------------------------------------------------------------------

// rdma_create_event_channel(3): "NULL if the request fails. On failure, errno will be set".
SV_CM_NULL(rdma_create_event_channel, struct rdma_event_channel, void)
SV_CM_VOID(rdma_destroy_event_channel, struct rdma_event_channel*)
SV_CM_MINUS_ONE(rdma_get_cm_event, struct rdma_event_channel*, struct rdma_cm_event**)
SV_CM_MINUS_ONE(rdma_migrate_id, struct rdma_cm_id*, struct rdma_event_channel*)

// rdma_ack_cm_event(3): "0 on success, or -1 on error". No event was ever returned by
// rdma_get_cm_event, so any argument (NULL included) is refused with EINVAL.
// support: rdma_ack_cm_event | stub | -1, errno EINVAL for any event (none exists yet)
SV_EXPORT int rdma_ack_cm_event(struct rdma_cm_event* event) {
  try {
    return ReturnMinusOne("rdma_ack_cm_event", {},
                          event == nullptr ? softverbs::Invalid("event is NULL")
                                           : rdmacm::NotOurs("event"));
  } catch (...) {
    errno = EINVAL;
    return -1;
  }
}

// rdma_event_str(3): "a pointer to a static character string corresponding to the event".
// support: rdma_event_str | implemented | the enum name; "UNKNOWN EVENT" otherwise
SV_EXPORT const char* rdma_event_str(enum rdma_cm_event_type event) {
  // Indexed by the enum value (0..15 in rdma_cma.h).
  static constexpr const char* kNames[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",    "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",   "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",    "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",         "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",     "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",   "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",      "RDMA_CM_EVENT_TIMEWAIT_EXIT",
  };
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == RDMA_CM_EVENT_TIMEWAIT_EXIT + 1);
  // The caller may pass any int cast to the enum; compare as unsigned to reject negatives too.
  auto index = static_cast<unsigned>(event);
  if (index < sizeof(kNames) / sizeof(kNames[0])) return kNames[index];
  return "UNKNOWN EVENT";
}

// --- identifiers, addresses, routes -------------------------------------------------------------

SV_CM_MINUS_ONE(rdma_create_id, struct rdma_event_channel*, struct rdma_cm_id**, void*,
                enum rdma_port_space)
SV_CM_MINUS_ONE(rdma_destroy_id, struct rdma_cm_id*)
// rdma_create_ep(3): "0 on success, or -1 on error"; rdma_destroy_ep returns nothing.
SV_CM_MINUS_ONE(rdma_create_ep, struct rdma_cm_id**, struct rdma_addrinfo*, struct ibv_pd*,
                struct ibv_qp_init_attr*)
SV_CM_VOID(rdma_destroy_ep, struct rdma_cm_id*)
SV_CM_MINUS_ONE(rdma_bind_addr, struct rdma_cm_id*, struct sockaddr*)
SV_CM_MINUS_ONE(rdma_resolve_addr, struct rdma_cm_id*, struct sockaddr*, struct sockaddr*, int)
SV_CM_MINUS_ONE(rdma_resolve_route, struct rdma_cm_id*, int)
SV_CM_MINUS_ONE(rdma_set_option, struct rdma_cm_id*, int, int, void*, size_t)

// rdma_get_src_port(3) / rdma_get_dst_port(3): "If the rdma_cm_id is not bound to a port [not
// connected], the returned value is 0." No id is ever bound here, so 0 is the documented answer.
// support: rdma_get_src_port | EOPNOTSUPP | returns 0 ("not bound"); logs, errno untouched
SV_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id*) {
  softverbs::abi::Refuse("rdma_get_src_port");
  return 0;
}
// support: rdma_get_dst_port | EOPNOTSUPP | returns 0 ("not connected"); logs, errno untouched
SV_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id*) {
  softverbs::abi::Refuse("rdma_get_dst_port");
  return 0;
}

// rdma_getaddrinfo(3): "0 on success, or -1 on error (errno will be set ...)". *res is cleared
// so that a caller's unconditional rdma_freeaddrinfo(res) takes the NULL path.
// support: rdma_getaddrinfo | EOPNOTSUPP | -1 + errno; *res set to NULL
SV_EXPORT int rdma_getaddrinfo(const char*, const char*, const struct rdma_addrinfo*,
                               struct rdma_addrinfo** res) {
  if (res != nullptr) *res = nullptr;
  return softverbs::abi::RefuseMinusOne("rdma_getaddrinfo");
}

// rdma_freeaddrinfo(3) returns nothing. NULL is a no-op (as free(NULL)); anything else did not
// come from rdma_getaddrinfo (which always refuses), so it is logged and left alone.
// support: rdma_freeaddrinfo | stub | NULL: no-op; other lists (never ours) logged, not freed
SV_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo* res) {
  if (res == nullptr) return;
  try {
    LogRefusal("rdma_freeaddrinfo", {}, rdmacm::NotOurs("address list"));
  } catch (...) {
  }
}

// --- devices ------------------------------------------------------------------------------------

// rdma_get_devices(3): "NULL if the request fails. On failure, errno will be set". num_devices
// is "set to the number of devices returned", which is 0.
// support: rdma_get_devices | EOPNOTSUPP | NULL + errno; *num_devices set to 0
SV_EXPORT struct ibv_context** rdma_get_devices(int* num_devices) {
  if (num_devices != nullptr) *num_devices = 0;
  return static_cast<struct ibv_context**>(softverbs::abi::RefuseNull("rdma_get_devices"));
}

// rdma_free_devices(3) returns nothing. NULL is a no-op; any other list did not come from
// rdma_get_devices (which always refuses), so it is logged and left alone.
// support: rdma_free_devices | stub | NULL: no-op; other lists (never ours) logged, not freed
SV_EXPORT void rdma_free_devices(struct ibv_context** list) {
  if (list == nullptr) return;
  try {
    LogRefusal("rdma_free_devices", {}, rdmacm::NotOurs("device list"));
  } catch (...) {
  }
}

// --- QP and SRQ (rdma_create_qp(3), rdma_create_srq(3)) -----------------------------------------

SV_CM_MINUS_ONE(rdma_create_qp, struct rdma_cm_id*, struct ibv_pd*, struct ibv_qp_init_attr*)
// No man page of its own; same convention as rdma_create_qp(3).
SV_CM_MINUS_ONE(rdma_create_qp_ex, struct rdma_cm_id*, struct ibv_qp_init_attr_ex*)
SV_CM_VOID(rdma_destroy_qp, struct rdma_cm_id*)
SV_CM_MINUS_ONE(rdma_create_srq, struct rdma_cm_id*, struct ibv_pd*, struct ibv_srq_init_attr*)
// No man page of its own; same convention as rdma_create_srq(3).
SV_CM_MINUS_ONE(rdma_create_srq_ex, struct rdma_cm_id*, struct ibv_srq_init_attr_ex*)
SV_CM_VOID(rdma_destroy_srq, struct rdma_cm_id*)
SV_CM_MINUS_ONE(rdma_init_qp_attr, struct rdma_cm_id*, struct ibv_qp_attr*, int*)

// --- connections --------------------------------------------------------------------------------

SV_CM_MINUS_ONE(rdma_connect, struct rdma_cm_id*, struct rdma_conn_param*)
SV_CM_MINUS_ONE(rdma_establish, struct rdma_cm_id*)
SV_CM_MINUS_ONE(rdma_listen, struct rdma_cm_id*, int)
SV_CM_MINUS_ONE(rdma_get_request, struct rdma_cm_id*, struct rdma_cm_id**)
SV_CM_MINUS_ONE(rdma_accept, struct rdma_cm_id*, struct rdma_conn_param*)
SV_CM_MINUS_ONE(rdma_reject, struct rdma_cm_id*, const void*, uint8_t)
// No man page of its own; same convention as rdma_reject(3).
SV_CM_MINUS_ONE(rdma_reject_ece, struct rdma_cm_id*, const void*, uint8_t)
SV_CM_MINUS_ONE(rdma_notify, struct rdma_cm_id*, enum ibv_event_type)
SV_CM_MINUS_ONE(rdma_disconnect, struct rdma_cm_id*)
SV_CM_MINUS_ONE(rdma_set_local_ece, struct rdma_cm_id*, struct ibv_ece*)
SV_CM_MINUS_ONE(rdma_get_remote_ece, struct rdma_cm_id*, struct ibv_ece*)

// --- multicast ----------------------------------------------------------------------------------

SV_CM_MINUS_ONE(rdma_join_multicast, struct rdma_cm_id*, struct sockaddr*, void*)
SV_CM_MINUS_ONE(rdma_join_multicast_ex, struct rdma_cm_id*, struct rdma_cm_join_mc_attr_ex*, void*)
SV_CM_MINUS_ONE(rdma_leave_multicast, struct rdma_cm_id*, struct sockaddr*)
