// Queue pairs: ibv_create_qp, the create_qp_ex context op, ibv_modify_qp, ibv_query_qp,
// ibv_destroy_qp, ibv_set_ece, ibv_query_ece (seeds ibv_create_qp(3), ibv_create_qp_ex(3),
// ibv_modify_qp(3); ibv_set_ece(3)).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "abi/common/errno_convention.h"
#include "abi/mlx5dv/provider.h"
#include "abi/verbs/convert.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "base/log.h"
#include "base/strings.h"
#include "core/device.h"
#include "transport/qp_endpoint.h"
#include "transport/recv_queue.h"

using namespace softverbs;
using namespace softverbs::abi;

namespace softverbs::abi {

std::string Name(const ibv_qp* qp) { return ObjectName("qp", qp->qp_num); }

namespace {

// The ECE options softverbs supports (ibv_set_ece(3)): none, see ibv_set_ece below.
constexpr uint32_t kSupportedEceOptions = 0;

// After a successful ibv_modify_qp: the options ibv_set_ece asked for take effect, within what
// the device supports (mlx5 modify_qp: get_ece = the firmware's answer, set_ece cleared).
void CommitEce(SvQp* q) {
  if (q->ece_requested == 0) return;
  q->ece_agreed = q->ece_requested & kSupportedEceOptions;
  q->ece_requested = 0;
}

// One path for both create calls: ibv_qp_init_attr_ex in, the QP (or NULL + errno) out. Refusals
// name the verb the application called and the PD (or the context when there is none).
ibv_qp* CreateQp(const char* verb, ibv_context* context, ibv_qp_init_attr_ex* attr,
                 const core::QpInitAttributes* provider) {
  ibv_pd* pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr;
  const std::string object = pd ? Name(pd) : std::string(context->device->name);
  constexpr uint32_t kKnownMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                  IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE |
                                  IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (attr->comp_mask & ~kKnownMask)
    return ReturnNull<ibv_qp>(verb, object, Invalid("comp_mask has unknown bits " + std::to_string(attr->comp_mask & ~kKnownMask)));

  core::QpInitAttributes init;
  if (provider != nullptr) {  // mlx5dv_create_qp's own fields (core/dc.h)
    init.dc = provider->dc;
    init.has_mlx5_create_flags = provider->has_mlx5_create_flags;
    init.mlx5_create_flags = provider->mlx5_create_flags;
  }
  init.type = static_cast<core::QpType>(attr->qp_type);
  // Every object the QP uses must belong to the context it is created on.
  for (ibv_context* owner : {pd ? pd->context : context, attr->send_cq ? attr->send_cq->context : context,
                             attr->recv_cq ? attr->recv_cq->context : context,
                             attr->srq ? attr->srq->context : context}) {
    if (owner != context)
      return ReturnNull<ibv_qp>(verb, object, Invalid("pd, send_cq, recv_cq and srq must belong to this context"));
  }
  init.pd = pd ? ToSv(pd)->core : nullptr;
  init.send_cq = attr->send_cq ? ToSv(attr->send_cq)->core.get() : nullptr;
  init.recv_cq = attr->recv_cq ? ToSv(attr->recv_cq)->core.get() : nullptr;
  init.srq = attr->srq ? ToSv(attr->srq)->core.get() : nullptr;
  init.cap = ToCore(attr->cap);
  init.sq_sig_all = attr->sq_sig_all != 0;
  init.has_xrcd = (attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) != 0;
  if (init.has_xrcd && attr->xrcd != nullptr) {
    if (attr->xrcd->context != context)
      return ReturnNull<ibv_qp>(verb, object, Invalid("the XRC domain belongs to another context"));
    init.xrcd = ToSv(attr->xrcd)->core.get();
  }
  init.has_create_flags = (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0;
  init.create_flags = init.has_create_flags ? attr->create_flags : 0;
  init.has_max_tso_header = (attr->comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) != 0;
  init.max_tso_header = init.has_max_tso_header ? attr->max_tso_header : 0;
  init.has_rwq_ind_table = (attr->comp_mask & IBV_QP_INIT_ATTR_IND_TABLE) != 0;
  init.has_rx_hash = (attr->comp_mask & IBV_QP_INIT_ATTR_RX_HASH) != 0;
  init.has_send_ops_flags = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  init.send_ops_flags = init.has_send_ops_flags ? attr->send_ops_flags : 0;
  init.source_qpn = attr->source_qpn;
  if (init.has_rwq_ind_table) {
    if (attr->rwq_ind_tbl != nullptr && attr->rwq_ind_tbl->context != context)
      return ReturnNull<ibv_qp>(verb, object, Invalid("rwq_ind_tbl belongs to another context"));
    init.ind_table = CoreOf(attr->rwq_ind_tbl);
  }
  if (init.has_rx_hash) {
    const ibv_rx_hash_conf& h = attr->rx_hash_conf;
    init.rx_hash_function = h.rx_hash_function;
    if (h.rx_hash_key_len != 0 && h.rx_hash_key == nullptr)
      return ReturnNull<ibv_qp>(verb, object, Invalid("rx_hash_key is NULL"));
    init.rx_hash_key.assign(h.rx_hash_key, h.rx_hash_key + h.rx_hash_key_len);
    init.rx_hash_fields_mask = h.rx_hash_fields_mask;
  }

  // On a parent domain: its allocator is asked for the QP's rings (domains.cc).
  SvPd* parent = nullptr;
  size_t ring = sizeof(transport::QpEndpoint);
  if (init.srq == nullptr)
    ring += sizeof(transport::RecvRing) + transport::RecvWqeSize(init.cap.max_recv_sge) * (init.cap.max_recv_wr + 1);
  if (Status s = UseParentDomain(verb, pd, ring, static_cast<size_t>(sysconf(_SC_PAGESIZE)), MLX5DV_RES_TYPE_QP,
                                 &parent);
      !s.ok())
    return ReturnNull<ibv_qp>(verb, object, s);
  auto core = core::Qp::Create(*ToSv(context)->core, init);
  auto* qp = core.ok() ? new (std::nothrow) SvQp{} : nullptr;
  if (qp == nullptr) {
    ReleaseParentDomain(parent);
    return ReturnNull<ibv_qp>(verb, object, core.ok() ? NoMemory("out of memory") : core.status());
  }
  qp->parent_domain = parent;
  qp->core = std::move(core.value());
  qp->core->set_user_handle(&qp->qpx.qp_base);
  ibv_qp& q = qp->qpx.qp_base;
  q.context = context;
  q.qp_context = attr->qp_context;
  // What the QP kept (XRC_RECV keeps no PD, CQ or SRQ; XRC_SEND no receive CQ of its own).
  q.pd = init.pd != nullptr ? pd : nullptr;
  q.send_cq = init.send_cq != nullptr ? attr->send_cq : nullptr;
  q.recv_cq = init.recv_cq != nullptr ? (init.recv_cq == init.send_cq ? attr->send_cq : attr->recv_cq) : nullptr;
  q.srq = init.srq != nullptr ? attr->srq : nullptr;
  q.handle = qp->core->qp_num();
  q.qp_num = qp->core->qp_num();
  q.state = IBV_QPS_RESET;
  q.qp_type = attr->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  qp->has_qp_ex = init.has_send_ops_flags;
  InitQpEx(qp, init.send_ops_flags);
  if (qp->has_qp_ex) InitDvQpEx(qp);  // its mlx5dv_qp_ex too (mlx5dv_qp_ex_from_ibv_qp_ex(3))
  // The seeds: the actual capabilities (>= the request) are written back.
  attr->cap = ToIbv(init.cap);
  SV_LOG(kDebug, "%s: %s%s%s qp 0x%x created (send_wr %u, recv_wr %u, inline %u)", verb,
         core::QpTypeName(init.type), init.dc.role != core::DcRole::kNone ? " " : "",
         init.dc.role != core::DcRole::kNone ? core::DcRoleName(init.dc.role) : "", q.qp_num, init.cap.max_send_wr, init.cap.max_recv_wr,
         init.cap.max_inline_data);
  return &q;
}

}  // namespace

// ibv_open_qp(3): comp_mask needs IBV_QP_OPEN_ATTR_NUM, _XRCD and _TYPE (libibverbs'
// ibv_cmd_open_qp); the type must be IBV_QPT_XRC_RECV; the QP must be a target QP of the domain.
ibv_qp* OpenQp(ibv_context* context, ibv_qp_open_attr* attr) {
  const char* verb = "ibv_open_qp";
  const std::string object = context->device->name;
  constexpr uint32_t kNeeded = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED)
    return ReturnNull<ibv_qp>(verb, object, Invalid("comp_mask has unknown bits"));
  if ((attr->comp_mask & kNeeded) != kNeeded || attr->xrcd == nullptr)
    return ReturnNull<ibv_qp>(verb, object, Invalid("comp_mask needs IBV_QP_OPEN_ATTR_NUM, _XRCD and _TYPE, and an xrcd"));
  if (attr->qp_type != IBV_QPT_XRC_RECV)
    return ReturnNull<ibv_qp>(verb, object, Invalid("only IBV_QPT_XRC_RECV QPs are opened (ibv_open_qp(3))"));
  if (attr->xrcd->context != context)
    return ReturnNull<ibv_qp>(verb, object, Invalid("the XRC domain belongs to another context"));
  auto opened = core::OpenedQp::Open(*ToSv(context)->core, *ToSv(attr->xrcd)->core, attr->qp_num);
  if (!opened.ok()) return ReturnNull<ibv_qp>(verb, object, opened.status());
  auto* qp = new (std::nothrow) SvQp{};
  if (qp == nullptr) return ReturnNull<ibv_qp>(verb, object, NoMemory("out of memory"));
  qp->opened = std::move(opened.value());
  qp->opened->set_user_handle(&qp->qpx.qp_base);
  ibv_qp& q = qp->qpx.qp_base;
  q.context = context;
  q.qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr;
  q.handle = attr->qp_num;
  q.qp_num = attr->qp_num;
  q.qp_type = IBV_QPT_XRC_RECV;
  auto now = qp->opened->Query();
  q.state = now.ok() ? static_cast<ibv_qp_state>(now->qp_state) : IBV_QPS_RESET;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  InitQpEx(qp, 0);
  SV_LOG(kDebug, "%s: XRC_RECV qp 0x%x opened", verb, q.qp_num);
  return &q;
}

ibv_qp* CreateQpEx(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  return CreateQp("ibv_create_qp_ex", context, attr, nullptr);
}

ibv_qp* CreateQpWith(const char* verb, ibv_context* context, ibv_qp_init_attr_ex* attr,
                     const core::QpInitAttributes* provider) {
  return CreateQp(verb, context, attr, provider);
}

}  // namespace softverbs::abi

SV_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  ibv_qp_init_attr_ex ex{};
  ex.qp_context = attr->qp_context;
  ex.send_cq = attr->send_cq;
  ex.recv_cq = attr->recv_cq;
  ex.srq = attr->srq;
  ex.cap = attr->cap;
  ex.qp_type = attr->qp_type;
  ex.sq_sig_all = attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = CreateQp("ibv_create_qp", pd->context, &ex, nullptr);
  if (qp != nullptr) attr->cap = ex.cap;
  return qp;
}
SV_DEFAULT_VERSION(ibv_create_qp);

SV_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  SvQp* q = ToSv(qp);
  if (q->opened != nullptr) {  // an ibv_open_qp handle (core/xrc_qp.h)
    Status s = q->opened->Modify(ToCore(*attr), static_cast<uint32_t>(attr_mask));
    if (!s.ok()) return ReturnErrno("ibv_modify_qp", Name(qp), s);
    CommitEce(q);
    if (attr_mask & IBV_QP_STATE) qp->state = attr->qp_state;
    return 0;
  }
  Status s = q->core->Modify(ToCore(*attr), static_cast<uint32_t>(attr_mask));
  if (!s.ok()) return ReturnErrno("ibv_modify_qp", Name(qp), s);
  CommitEce(q);
  qp->state = static_cast<ibv_qp_state>(q->core->state());
  SV_LOG(kDebug, "ibv_modify_qp(%s): now %s", Name(qp).c_str(), core::QpStateName(q->core->state()));
  return 0;
}
SV_DEFAULT_VERSION(ibv_modify_qp);

SV_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init_attr) {
  // ibv_query_qp(3): attr_mask is a hint; every attribute is returned.
  SvQp* q = ToSv(qp);
  if (q->opened != nullptr) {
    auto a = q->opened->Query();
    if (!a.ok()) return ReturnErrno("ibv_query_qp", Name(qp), a.status());
    *attr = ToIbv(*a);
    qp->state = attr->qp_state;
    if (init_attr != nullptr) {
      memset(init_attr, 0, sizeof(*init_attr));
      init_attr->qp_context = qp->qp_context;
      init_attr->qp_type = qp->qp_type;
    }
    return 0;
  }
  *attr = ToIbv(q->core->Query());
  qp->state = attr->qp_state;
  if (init_attr != nullptr) {
    memset(init_attr, 0, sizeof(*init_attr));
    init_attr->qp_context = qp->qp_context;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
    init_attr->cap = attr->cap;
    init_attr->qp_type = qp->qp_type;
    init_attr->sq_sig_all = q->core->init().sq_sig_all;
  }
  return 0;
}
SV_DEFAULT_VERSION(ibv_query_qp);

SV_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  SvQp* q = ToSv(qp);
  if (q->core != nullptr)
    if (Status s = q->core->CheckDestroy(); !s.ok()) return ReturnErrno("ibv_destroy_qp", Name(qp), s);
  ToSv(qp->context)->core->DropAsyncEventsFor(qp);
  pthread_cond_destroy(&qp->cond);
  pthread_mutex_destroy(&qp->mutex);
  ReleaseParentDomain(q->parent_domain);
  delete q;
  return 0;
}
SV_DEFAULT_VERSION(ibv_destroy_qp);

SV_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  // Only a QP created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS has the send-op interface.
  SvQp* q = ToSv(qp);
  return q->has_qp_ex ? &q->qpx : nullptr;
}

SV_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) {
  // 0 for every opcode (ibv_query_qp_data_in_order(3)): bytes are placed by process_vm_writev
  // or memcpy, and neither promises to write a buffer front to back (glibc stores the tail of a
  // small copy first; fast-string copies may retire stores out of order): a reader must wait
  // for the completion.
  return 0;
}

// ECE (enhanced connection establishment): the options a QP negotiates with its peer through
// the CM (rdma_set_local_ece(3)). softverbs has no optional wire behaviour to switch on, so the
// options it supports are none: it takes part in the handshake with its vendor ID and agrees to
// no option, as an mlx5 device agrees to the subset its firmware supports.
SV_EXPORT int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  // libibverbs' own check comes first (verbs.c ibv_set_ece): no vendor, no ECE -> EOPNOTSUPP.
  Status s;
  if (ece == nullptr)
    s = Invalid("ece is NULL");
  else if (ece->vendor_id == 0)
    s = NotSupported("vendor_id 0: no vendor, no ECE (libibverbs ibv_set_ece)");
  else if (ece->comp_mask != 0)
    s = Invalid("comp_mask " + std::to_string(ece->comp_mask) + " is not 0: ibv_ece has no optional field (mlx5_set_ece)");
  else if (ece->vendor_id != core::Identity().vendor_id)
    s = Invalid("vendor_id " + Hex(ece->vendor_id) + " is not the device's " + Hex(core::Identity().vendor_id) +
                " (ibv_query_device's vendor_id; mlx5_set_ece refuses another vendor's)");
  if (!s.ok()) {
    errno = s.code();
    return ReturnErrno("ibv_set_ece", Name(qp), s);
  }
  // mlx5: options are not checked here; the next modify applies what the device supports and
  // ibv_query_ece reports 0 until then. Unsupported bits are dropped, never refused.
  SvQp* q = ToSv(qp);
  q->ece_requested = ece->options;
  q->ece_agreed = 0;
  SV_LOG(kDebug, "ibv_set_ece(%s): options %s requested, %s supported", Name(qp).c_str(),
         Hex(ece->options).c_str(), Hex(kSupportedEceOptions).c_str());
  return 0;
}

SV_EXPORT int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  if (ece == nullptr) {
    errno = EINVAL;
    return ReturnErrno("ibv_query_ece", Name(qp), Invalid("ece is NULL"));
  }
  ece->vendor_id = core::Identity().vendor_id;
  ece->options = ToSv(qp)->ece_agreed;
  ece->comp_mask = 0;
  return 0;
}
