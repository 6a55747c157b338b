// rdma_create_qp(3) (a seed of the product), rdma_create_qp_ex, rdma_destroy_qp,
// rdma_init_qp_attr(3).
#include "abi/rdmacm/qp.h"

#include <cstring>

#include "abi/common/errno_convention.h"
#include "abi/rdmacm/objects.h"
#include "abi/rdmacm/refuse.h"
#include "base/log.h"

namespace softverbs::abi::rdmacm {

int ConnectedAccess(ibv_qp_type type, uint8_t max_dest_rd_atomic) {
  int access = IBV_ACCESS_REMOTE_WRITE;
  if (type == IBV_QPT_RC && max_dest_rd_atomic > 0)
    access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  return access;
}

void PathToAttr(const cm::ConnectedPath& path, ibv_qp_type type, ibv_qp_state state,
                ibv_qp_attr* attr, int* mask) {
  *attr = {};
  attr->qp_state = state;
  *mask = IBV_QP_STATE;
  if (state == IBV_QPS_RTR) {
    if (type == IBV_QPT_UD) return;
    // RoCE: a GRH with the peer's GID (DESIGN.md 3, core/ah.cc CheckRoceAddressVector).
    attr->ah_attr.is_global = 1;
    memcpy(attr->ah_attr.grh.dgid.raw, path.dgid.data(), 16);
    attr->ah_attr.grh.sgid_index = path.sgid_index;
    attr->ah_attr.grh.hop_limit = 64;
    attr->ah_attr.grh.traffic_class = path.traffic_class;
    attr->ah_attr.port_num = path.port_num;
    attr->path_mtu = static_cast<ibv_mtu>(path.path_mtu);
    attr->dest_qp_num = path.dest_qpn;
    attr->rq_psn = path.rq_psn;
    attr->qp_access_flags = ConnectedAccess(type, path.max_dest_rd_atomic);
    *mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_ACCESS_FLAGS;
    if (type == IBV_QPT_RC) {
      attr->max_dest_rd_atomic = path.max_dest_rd_atomic;
      attr->min_rnr_timer = path.min_rnr_timer;
      *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
  } else if (state == IBV_QPS_RTS) {
    attr->sq_psn = path.sq_psn;
    *mask |= IBV_QP_SQ_PSN;
    if (type == IBV_QPT_RC) {
      attr->timeout = path.timeout;
      attr->retry_cnt = path.retry_cnt;
      attr->rnr_retry = path.rnr_retry;
      attr->max_rd_atomic = path.max_rd_atomic;
      *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
  }
}

Status CmQp::ToRtrRts(const cm::ConnectedPath& path) {
  for (ibv_qp_state state : {IBV_QPS_RTR, IBV_QPS_RTS}) {
    ibv_qp_attr attr;
    int mask;
    PathToAttr(path, qp_->qp_type, state, &attr, &mask);
    if (int rc = ibv_modify_qp(qp_, &attr, mask); rc != 0)
      return Status(rc, std::string("ibv_modify_qp to ") + (state == IBV_QPS_RTR ? "RTR" : "RTS") +
                            " failed: " + strerror(rc));
  }
  if (response_ece_) {
    // ucma_process_conn_resp_ece: the options the provider agreed to become the local ones.
    response_ece_ = false;
    ibv_ece ece{};
    int rc = ibv_query_ece(qp_, &ece);
    if (rc != 0 && rc != EOPNOTSUPP) return Status(rc, std::string("ibv_query_ece failed: ") + strerror(rc));
    owner_->local_ece.options = rc == EOPNOTSUPP ? 0 : ece.options;
  }
  return Status::Ok();
}

// librdmacm's ucma_process_conn_resp_ece: a REP without ECE (vendor 0: the peer or its kernel
// does not take part) clears the QP's options; a REP naming another vendor than the one this
// side sent means the handshake went wrong -> the QP to ERR and CONNECT_ERROR.
Status CmQp::TakeResponseEce(const cm::Ece& received) {
  ibv_ece ece{received.vendor_id, received.options, 0};
  if (received.vendor_id == 0) {
    ece.vendor_id = owner_->local_ece.vendor_id;
    ece.options = 0;
  } else if (received.vendor_id != owner_->local_ece.vendor_id) {
    (void)ToError();
    return Invalid("the REP's ECE vendor ID " + std::to_string(received.vendor_id) + " is not the " +
                   std::to_string(owner_->local_ece.vendor_id) +
                   " this side sent (librdmacm ucma_process_conn_resp_ece)");
  }
  owner_->remote_ece.vendor_id = received.vendor_id;
  int rc = ibv_set_ece(qp_, &ece);
  if (rc != 0 && rc != EOPNOTSUPP) return Status(rc, std::string("ibv_set_ece refused the REP's ECE: ") + strerror(rc));
  response_ece_ = true;
  return Status::Ok();
}

Status CmQp::ToError() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  if (int rc = ibv_modify_qp(qp_, &attr, IBV_QP_STATE); rc != 0)
    return Status(rc, "ibv_modify_qp to ERR failed");
  return Status::Ok();
}

Status CmQp::Attach(const cm::Gid& mgid) {
  ibv_gid gid;
  memcpy(gid.raw, mgid.data(), 16);
  // RoCE has no LIDs: the multicast LID is unused (0).
  if (int rc = ibv_attach_mcast(qp_, &gid, 0); rc != 0)
    return Status(rc, std::string("ibv_attach_mcast refused the group: ") + strerror(rc));
  return Status::Ok();
}

Status CmQp::Detach(const cm::Gid& mgid) {
  ibv_gid gid;
  memcpy(gid.raw, mgid.data(), 16);
  if (int rc = ibv_detach_mcast(qp_, &gid, 0); rc != 0)
    return Status(rc, std::string("ibv_detach_mcast: ") + strerror(rc));
  return Status::Ok();
}

namespace {

// The CQ and completion channel rdma_create_qp makes for a NULL send_cq/recv_cq.
Status MakeCq(ibv_context* context, uint32_t depth, ibv_comp_channel** channel, ibv_cq** cq) {
  *channel = ibv_create_comp_channel(context);
  if (*channel == nullptr) return Status(errno, "cannot create a completion channel");
  *cq = ibv_create_cq(context, depth > 0 ? static_cast<int>(depth) : 1, nullptr, *channel, 0);
  if (*cq == nullptr) {
    int e = errno;
    ibv_destroy_comp_channel(*channel);
    *channel = nullptr;
    return Status(e, "cannot create a CQ of " + std::to_string(depth) + " entries");
  }
  return Status::Ok();
}

void DestroyCmCqs(CmId* id) {
  if (!id->cm_made_cqs) return;
  rdma_cm_id& p = id->pub;
  if (p.send_cq != nullptr && p.send_cq != p.recv_cq) ibv_destroy_cq(p.send_cq);
  if (p.recv_cq != nullptr) ibv_destroy_cq(p.recv_cq);
  if (p.send_cq_channel != nullptr && p.send_cq_channel != p.recv_cq_channel)
    ibv_destroy_comp_channel(p.send_cq_channel);
  if (p.recv_cq_channel != nullptr) ibv_destroy_comp_channel(p.recv_cq_channel);
  p.send_cq = p.recv_cq = nullptr;
  p.send_cq_channel = p.recv_cq_channel = nullptr;
  id->cm_made_cqs = false;
}

// RESET→INIT (and for UD on to RTS): "After being allocated, the QP will be ready to handle
// posting of receives. If the QP is unconnected, it will be ready to post sends."
Status ReadyQp(CmId* id, ibv_qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = id->pub.port_num != 0 ? id->pub.port_num : 1;
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  if (qp->qp_type == IBV_QPT_UD) {
    attr.qkey = id->core->qkey();
    mask |= IBV_QP_QKEY;
  } else {
    attr.qp_access_flags = 0;  // widened at RTR once the responder resources are known
    mask |= IBV_QP_ACCESS_FLAGS;
  }
  if (int rc = ibv_modify_qp(qp, &attr, mask); rc != 0)
    return Status(rc, std::string("cannot move the new QP to INIT: ") + strerror(rc));
  if (qp->qp_type != IBV_QPT_UD) return Status::Ok();
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE); rc != 0)
    return Status(rc, std::string("cannot move the UD QP to RTR: ") + strerror(rc));
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN); rc != 0)
    return Status(rc, std::string("cannot move the UD QP to RTS: ") + strerror(rc));
  return Status::Ok();
}

// rdma-core's init_ece (cma.c): the new QP's ECE is the identifier's local one; a QP made for a
// request takes the requester's options when the vendor is the same, none otherwise.
Status InitEce(CmId* id, ibv_qp* qp) {
  ibv_ece ece{};
  int rc = ibv_query_ece(qp, &ece);
  if (rc != 0 && rc != EOPNOTSUPP) return Status(rc, std::string("ibv_query_ece of the new QP failed: ") + strerror(rc));
  id->local_ece.vendor_id = ece.vendor_id;
  id->local_ece.options = ece.options;
  if (id->remote_ece.vendor_id == 0) return Status::Ok();  // not made for a request with ECE
  if (id->remote_ece.vendor_id != id->local_ece.vendor_id) {
    ece.vendor_id = id->local_ece.vendor_id;
    ece.options = 0;
  } else {
    ece.vendor_id = id->remote_ece.vendor_id;
    ece.options = id->remote_ece.options;
  }
  rc = ibv_set_ece(qp, &ece);
  if (rc != 0 && rc != EOPNOTSUPP) return Status(rc, std::string("ibv_set_ece of the new QP failed: ") + strerror(rc));
  return Status::Ok();
}

// rdma-core's set_local_ece: after INIT, the options the provider agreed to are what the REP
// will carry.
Status AgreedEce(CmId* id, ibv_qp* qp) {
  if (id->remote_ece.vendor_id == 0) return Status::Ok();
  ibv_ece ece{};
  int rc = ibv_query_ece(qp, &ece);
  if (rc != 0 && rc != EOPNOTSUPP) return Status(rc, std::string("ibv_query_ece failed: ") + strerror(rc));
  id->local_ece.options = ece.options;
  return Status::Ok();
}

Status CreateQp(CmId* id, ibv_qp_init_attr_ex* attr) {
  rdma_cm_id& p = id->pub;
  if (p.verbs == nullptr)
    return Invalid("the identifier is not bound to a device: rdma_bind_addr or rdma_resolve_addr "
                   "first (rdma_create_qp(3))");
  if (p.qp != nullptr) return Invalid("the identifier already has a QP (\"An rdma_cm_id may only "
                                      "be associated with a single QP\", rdma_create_qp(3))");
  bool ud_id = id->core->ud();
  if (ud_id != (attr->qp_type == IBV_QPT_UD))
    return Invalid(std::string("a ") + (ud_id ? "UD" : "connected") + " identifier (port space " +
                   std::to_string(p.ps) + ") cannot carry a QP of type " +
                   std::to_string(attr->qp_type));
  if (attr->pd == nullptr) {
    Result<ibv_pd*> pd = DefaultPd();
    if (!pd.ok()) return pd.status();
    attr->pd = pd.value();
  }
  if (attr->pd->context != p.verbs)
    return Invalid("the PD is not of the identifier's device (rdma_create_qp(3))");
  attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  // An SRQ made on the identifier (rdma_create_srq) serves its QP unless the caller names one.
  if (attr->srq == nullptr && p.srq != nullptr) attr->srq = p.srq;
  bool made = false;
  if (attr->recv_cq == nullptr) {
    SV_RETURN_IF_ERROR(MakeCq(p.verbs, attr->cap.max_recv_wr, &p.recv_cq_channel, &p.recv_cq));
    attr->recv_cq = p.recv_cq;
    made = true;
  }
  if (attr->send_cq == nullptr) {
    Status s = MakeCq(p.verbs, attr->cap.max_send_wr, &p.send_cq_channel, &p.send_cq);
    if (!s.ok()) {
      id->cm_made_cqs = made;
      DestroyCmCqs(id);
      return s;
    }
    attr->send_cq = p.send_cq;
    made = true;
  }
  id->cm_made_cqs = made;
  ibv_qp* qp = ibv_create_qp_ex(p.verbs, attr);
  if (qp == nullptr) {
    int e = errno;
    DestroyCmCqs(id);
    return Status(e, std::string("ibv_create_qp_ex refused the attributes: ") + strerror(e));
  }
  Status ready = InitEce(id, qp);
  if (ready.ok()) ready = ReadyQp(id, qp);
  if (ready.ok()) ready = AgreedEce(id, qp);
  if (!ready.ok()) {
    ibv_destroy_qp(qp);
    DestroyCmCqs(id);
    return ready;
  }
  if (!made) {
    p.send_cq = attr->send_cq;
    p.recv_cq = attr->recv_cq;
  } else {
    if (p.send_cq == nullptr) p.send_cq = attr->send_cq;
    if (p.recv_cq == nullptr) p.recv_cq = attr->recv_cq;
  }
  p.pd = attr->pd;
  p.qp = qp;
  p.srq = attr->srq;
  SV_LOG(kDebug, "rdma_create_qp(%s): qp %u", IdName(&id->pub).c_str(), qp->qp_num);
  id->qp = std::make_unique<CmQp>(qp, id);
  std::lock_guard<std::mutex> lock(id->core->channel()->mutex());
  id->core->AttachQp(id->qp.get());
  return Status::Ok();
}

}  // namespace
}  // namespace softverbs::abi::rdmacm

namespace rdmacm = softverbs::abi::rdmacm;
using softverbs::Invalid;
using softverbs::abi::ReturnMinusOne;

// support: rdma_create_qp | implemented | default PD per device, CM-made CQs + channels, caps written back, one QP per id, INIT (UD: RTS) on return
SV_EXPORT int rdma_create_qp(struct rdma_cm_id* id, struct ibv_pd* pd,
                             struct ibv_qp_init_attr* qp_init_attr) {
  try {
    rdmacm::CmId* ours = rdmacm::Lookup(id);
    if (ours == nullptr)
      return ReturnMinusOne("rdma_create_qp", {}, Invalid("id is NULL or not an rdma_cm_id of softverbs"));
    if (qp_init_attr == nullptr)
      return ReturnMinusOne("rdma_create_qp", rdmacm::IdName(id), Invalid("qp_init_attr is NULL"));
    ibv_qp_init_attr_ex ex{};
    memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
    ex.pd = pd;
    softverbs::Status s = rdmacm::CreateQp(ours, &ex);
    if (!s.ok()) return ReturnMinusOne("rdma_create_qp", rdmacm::IdName(id), s);
    // "The actual capabilities and properties of the created QP will be returned to the user
    // through the qp_init_attr parameter."
    qp_init_attr->cap = ex.cap;
    qp_init_attr->send_cq = ex.send_cq;
    qp_init_attr->recv_cq = ex.recv_cq;
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

// support: rdma_create_qp_ex | implemented | as rdma_create_qp, attributes through ibv_create_qp_ex
SV_EXPORT int rdma_create_qp_ex(struct rdma_cm_id* id, struct ibv_qp_init_attr_ex* qp_init_attr) {
  try {
    rdmacm::CmId* ours = rdmacm::Lookup(id);
    if (ours == nullptr)
      return ReturnMinusOne("rdma_create_qp_ex", {}, Invalid("id is NULL or not an rdma_cm_id of softverbs"));
    if (qp_init_attr == nullptr)
      return ReturnMinusOne("rdma_create_qp_ex", rdmacm::IdName(id), Invalid("qp_init_attr is NULL"));
    if (!(qp_init_attr->comp_mask & IBV_QP_INIT_ATTR_PD)) qp_init_attr->pd = nullptr;
    softverbs::Status s = rdmacm::CreateQp(ours, qp_init_attr);
    if (!s.ok()) return ReturnMinusOne("rdma_create_qp_ex", rdmacm::IdName(id), s);
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}

// support: rdma_destroy_qp | implemented | destroys the QP and the CQs/channels rdma_create_qp made
SV_EXPORT void rdma_destroy_qp(struct rdma_cm_id* id) {
  rdmacm::CmId* ours = rdmacm::Lookup(id);
  if (ours == nullptr || id->qp == nullptr) {
    softverbs::abi::LogRefusal("rdma_destroy_qp", {}, Invalid("id is NULL, not softverbs', or has no QP"));
    return;
  }
  {
    // Multicast attachments go first: a QP still attached cannot be destroyed (EBUSY).
    std::lock_guard<std::mutex> lock(ours->core->channel()->mutex());
    ours->core->DetachAll();
    ours->core->AttachQp(nullptr);
  }
  ibv_destroy_qp(id->qp);
  id->qp = nullptr;
  ours->qp.reset();
  rdmacm::DestroyCmCqs(ours);
}

// support: rdma_init_qp_attr | implemented | INIT/RTR/RTS attributes and mask of the id's connection
SV_EXPORT int rdma_init_qp_attr(struct rdma_cm_id* id, struct ibv_qp_attr* qp_attr,
                                int* qp_attr_mask) {
  try {
    rdmacm::CmId* ours = rdmacm::Lookup(id);
    if (ours == nullptr)
      return ReturnMinusOne("rdma_init_qp_attr", {}, Invalid("id is NULL or not an rdma_cm_id of softverbs"));
    if (qp_attr == nullptr || qp_attr_mask == nullptr)
      return ReturnMinusOne("rdma_init_qp_attr", rdmacm::IdName(id), Invalid("qp_attr or qp_attr_mask is NULL"));
    ibv_qp_type type = id->qp != nullptr ? id->qp->qp_type
                                         : (ours->core->ud() ? IBV_QPT_UD : IBV_QPT_RC);
    ibv_qp_state state = qp_attr->qp_state;
    if (state == IBV_QPS_INIT) {
      *qp_attr = {};
      qp_attr->qp_state = IBV_QPS_INIT;
      qp_attr->pkey_index = 0;
      qp_attr->port_num = id->port_num != 0 ? id->port_num : 1;
      *qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      if (type == IBV_QPT_UD) {
        qp_attr->qkey = ours->core->qkey();
        *qp_attr_mask |= IBV_QP_QKEY;
      } else {
        std::lock_guard<std::mutex> lock(ours->core->channel()->mutex());
        softverbs::Result<softverbs::cm::ConnectedPath> path = ours->core->Path();
        qp_attr->qp_access_flags = rdmacm::ConnectedAccess(
            type, path.ok() ? path->max_dest_rd_atomic : 0);
        *qp_attr_mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    }
    if (state != IBV_QPS_RTR && state != IBV_QPS_RTS)
      return ReturnMinusOne("rdma_init_qp_attr", rdmacm::IdName(id),
                            Invalid("qp_attr->qp_state must be INIT, RTR or RTS"));
    if (type == IBV_QPT_UD) {
      rdmacm::PathToAttr({}, type, state, qp_attr, qp_attr_mask);
      return 0;
    }
    std::lock_guard<std::mutex> lock(ours->core->channel()->mutex());
    softverbs::Result<softverbs::cm::ConnectedPath> path = ours->core->Path();
    if (!path.ok()) return ReturnMinusOne("rdma_init_qp_attr", rdmacm::IdName(id), path.status());
    rdmacm::PathToAttr(path.value(), type, state, qp_attr, qp_attr_mask);
    return 0;
  } catch (...) {
    errno = ENOMEM;
    return -1;
  }
}
