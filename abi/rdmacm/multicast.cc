// rdma_join_multicast(3), rdma_join_multicast_ex, rdma_leave_multicast(3): a UD identifier's QP
// joins a group of the host (ibv_attach_mcast); MULTICAST_JOIN carries the group's address
// vector, QPN 0xFFFFFF and Q_Key in its ud_param.
#include <cerrno>

#include "abi/common/errno_convention.h"
#include "abi/rdmacm/objects.h"
#include "abi/rdmacm/refuse.h"

namespace rdmacm = softverbs::abi::rdmacm;
using softverbs::Invalid;
using softverbs::Status;
using softverbs::abi::ReturnMinusOne;

namespace {

int Join(const char* verb, rdma_cm_id* id, const sockaddr* addr, bool send_only, void* context) {
  try {
    rdmacm::CmId* ours = rdmacm::Lookup(id);
    if (ours == nullptr) return ReturnMinusOne(verb, {}, Invalid("id is NULL or not an rdma_cm_id of softverbs"));
    if (addr == nullptr) return ReturnMinusOne(verb, rdmacm::IdName(id), Invalid("addr is NULL"));
    Status s;
    {
      std::lock_guard<std::mutex> lock(ours->core->channel()->mutex());
      s = ours->core->JoinMulticast(addr, send_only, context);
    }
    if (!s.ok()) return ReturnMinusOne(verb, rdmacm::IdName(id), s);
    // A synchronous identifier has nothing to wait for but its MULTICAST_JOIN, which stays
    // queued on its channel as rdma-core leaves it.
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

}  // namespace

// support: rdma_join_multicast | implemented | UD ids bound to softverbs0; the QP (now or when created) is attached; MULTICAST_JOIN with ud_param (MGID, QPN 0xFFFFFF, Q_Key, context in private_data)
SV_EXPORT int rdma_join_multicast(struct rdma_cm_id* id, struct sockaddr* addr, void* context) {
  return Join("rdma_join_multicast", id, addr, false, context);
}

// support: rdma_join_multicast_ex | implemented | RDMA_MC_JOIN_FLAG_FULLMEMBER and _SENDONLY_FULLMEMBER (the QP is not attached)
SV_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id* id, struct rdma_cm_join_mc_attr_ex* attr,
                                     void* context) {
  if (attr == nullptr) return ReturnMinusOne("rdma_join_multicast_ex", {}, Invalid("mc_join_attr is NULL"));
  const uint32_t needed = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  if ((attr->comp_mask & needed) != needed || (attr->comp_mask & ~needed) != 0)
    return ReturnMinusOne("rdma_join_multicast_ex", {},
                          Invalid("comp_mask must be RDMA_CM_JOIN_MC_ATTR_ADDRESS | _JOIN_FLAGS"));
  if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER &&
      attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
    return ReturnMinusOne("rdma_join_multicast_ex", {},
                          Invalid("join_flags " + std::to_string(attr->join_flags) + " is unknown"));
  return Join("rdma_join_multicast_ex", id, attr->addr,
              attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, context);
}

// support: rdma_leave_multicast | implemented | detaches the QP; a group not joined → EADDRNOTAVAIL
SV_EXPORT int rdma_leave_multicast(struct rdma_cm_id* id, struct sockaddr* addr) {
  try {
    rdmacm::CmId* ours = rdmacm::Lookup(id);
    if (ours == nullptr)
      return ReturnMinusOne("rdma_leave_multicast", {}, Invalid("id is NULL or not an rdma_cm_id of softverbs"));
    if (addr == nullptr) return ReturnMinusOne("rdma_leave_multicast", rdmacm::IdName(id), Invalid("addr is NULL"));
    Status s;
    {
      std::lock_guard<std::mutex> lock(ours->core->channel()->mutex());
      s = ours->core->LeaveMulticast(addr);
    }
    if (!s.ok()) return ReturnMinusOne("rdma_leave_multicast", rdmacm::IdName(id), s);
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}
