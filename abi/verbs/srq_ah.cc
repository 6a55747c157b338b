// Shared receive queues, address handles and XRC domains.
#include <unistd.h>

#include <cstring>
#include <new>

#include "abi/common/errno_convention.h"
#include "abi/verbs/convert.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "base/log.h"
#include "transport/recv_queue.h"

using namespace softverbs;
using namespace softverbs::abi;

namespace softverbs::abi {

std::string Name(const ibv_srq* srq) { return ObjectName("srq", srq->handle); }

ibv_srq* CreateSrq(const char* verb, ibv_pd* pd, void* srq_context, ibv_srq_attr* attr,
                  ibv_xrcd* xrcd = nullptr, ibv_cq* cq = nullptr, const ibv_tm_cap* tm = nullptr) {
  core::SrqAttributes a{attr->max_wr, attr->max_sge, attr->srq_limit};
  // On a parent domain: its allocator is asked for the receive ring (domains.cc).
  SvPd* parent = nullptr;
  const size_t ring = sizeof(transport::RecvRing) + transport::RecvWqeSize(attr->max_sge) * (attr->max_wr + 1);
  if (Status s = UseParentDomain(verb, pd, ring, static_cast<size_t>(sysconf(_SC_PAGESIZE)), MLX5DV_RES_TYPE_SRQ,
                                 &parent);
      !s.ok())
    return ReturnNull<ibv_srq>(verb, Name(pd), s);
  auto core = xrcd != nullptr ? core::Srq::CreateXrc(*ToSv(pd)->core, a, *ToSv(xrcd)->core, *ToSv(cq)->core)
              : tm != nullptr ? core::Srq::CreateTm(*ToSv(pd)->core, a, *ToSv(cq)->core,
                                                   core::TmAttributes{tm->max_num_tags, tm->max_ops})
                              : core::Srq::Create(*ToSv(pd)->core, a);
  auto* srq = core.ok() ? new (std::nothrow) SvSrq{} : nullptr;
  if (srq == nullptr) {
    ReleaseParentDomain(parent);
    return ReturnNull<ibv_srq>(verb, Name(pd), core.ok() ? NoMemory("out of memory") : core.status());
  }
  srq->parent_domain = parent;
  srq->core = std::move(core.value());
  srq->core->set_user_handle(&srq->srq);
  srq->srq.context = pd->context;
  srq->srq.srq_context = srq_context;
  srq->srq.pd = pd;
  srq->srq.handle = srq->core->srq_num();
  pthread_mutex_init(&srq->srq.mutex, nullptr);
  pthread_cond_init(&srq->srq.cond, nullptr);
  // ibv_create_srq(3): the actual sizes are written back.
  attr->max_wr = a.max_wr;
  attr->max_sge = a.max_sge;
  return &srq->srq;
}

namespace {

// ibv_create_srq_ex(3) with IBV_SRQT_XRC: "xrcd" and "cq" are required, and a PD (libibverbs
// passes its handle to the kernel), all of this context.
ibv_srq* CreateXrcSrq(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  const char* verb = "ibv_create_srq_ex";
  const std::string object = context->device->name;
  constexpr uint32_t kNeeded = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  if ((attr->comp_mask & kNeeded) != kNeeded || attr->pd == nullptr || attr->xrcd == nullptr || attr->cq == nullptr)
    return ReturnNull<ibv_srq>(verb, object, Invalid("an XRC SRQ needs pd, xrcd and cq (IBV_SRQ_INIT_ATTR_PD | "
                                                     "IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ)"));
  if (attr->pd->context != context || attr->xrcd->context != context || attr->cq->context != context)
    return ReturnNull<ibv_srq>(verb, object, Invalid("pd, xrcd and cq must belong to this context"));
  ibv_srq* srq = CreateSrq(verb, attr->pd, attr->srq_context, &attr->attr, attr->xrcd, attr->cq);
  if (srq != nullptr)
    SV_LOG(kDebug, "%s: XRC srq 0x%x created (max_wr %u)", verb, srq->handle, attr->attr.max_wr);
  return srq;
}

// ibv_create_srq_ex(3) with IBV_SRQT_TM: a PD, and a CQ created by ibv_create_cq_ex (mlx5:
// "An extended CQ is required to read TM information from"), else EINVAL; tm_cap is read
// whatever comp_mask says, as libibverbs and mlx5 read it.
ibv_srq* CreateTmSrq(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  const char* verb = "ibv_create_srq_ex";
  const std::string object = context->device->name;
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr || attr->cq == nullptr)
    return ReturnNull<ibv_srq>(verb, object, Invalid("a tag matching SRQ needs pd and cq (IBV_SRQ_INIT_ATTR_PD, "
                                                     "attr->cq)"));
  if (attr->pd->context != context || attr->cq->context != context)
    return ReturnNull<ibv_srq>(verb, object, Invalid("pd and cq must belong to this context"));
  if (!ToSv(attr->cq)->extended)
    return ReturnNull<ibv_srq>(verb, object, Invalid("a tag matching SRQ needs a CQ created by ibv_create_cq_ex "
                                                     "(its TM completions are read through ibv_wc_read_tm_info)"));
  ibv_srq* srq = CreateSrq(verb, attr->pd, attr->srq_context, &attr->attr, nullptr, attr->cq, &attr->tm_cap);
  if (srq != nullptr)
    SV_LOG(kDebug, "%s: TM srq 0x%x created (max_num_tags %u, max_ops %u)", verb, srq->handle,
           attr->tm_cap.max_num_tags, attr->tm_cap.max_ops);
  return srq;
}

}  // namespace

// verbs_context::create_srq_ex: basic, XRC and tag matching SRQs.
ibv_srq* CreateSrqEx(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  const char* verb = "ibv_create_srq_ex";
  constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                              IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  if (attr->comp_mask & ~kKnown) return ReturnNull<ibv_srq>(verb, context->device->name, Invalid("comp_mask has unknown bits"));
  ibv_srq_type type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
  if (type == IBV_SRQT_XRC) return CreateXrcSrq(context, attr);
  if (type == IBV_SRQT_TM) return CreateTmSrq(context, attr);
  if (type != IBV_SRQT_BASIC) return ReturnNull<ibv_srq>(verb, context->device->name, Invalid("srq_type is not an ibv_srq_type"));
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr)
    return ReturnNull<ibv_srq>(verb, context->device->name, Invalid("a basic SRQ needs a PD (IBV_SRQ_INIT_ATTR_PD)"));
  if (attr->pd->context != context) return ReturnNull<ibv_srq>(verb, context->device->name, Invalid("the PD belongs to another context"));
  return CreateSrq(verb, attr->pd, attr->srq_context, &attr->attr);
}

int GetSrqNum(ibv_srq* srq, uint32_t* srq_num) {
  *srq_num = ToSv(srq)->core->srq_num();
  return 0;
}

// ibv_open_xrcd(3), checked as libibverbs' ibv_cmd_open_xrcd: comp_mask bits beyond the known
// ones are EOPNOTSUPP; IBV_XRCD_INIT_ATTR_FD and _OFLAGS are both required (EINVAL).
ibv_xrcd* OpenXrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  const char* verb = "ibv_open_xrcd";
  const std::string object = context->device->name;
  if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED)
    return ReturnNull<ibv_xrcd>(verb, object, Unsupported("comp_mask has bits beyond IBV_XRCD_INIT_ATTR_OFLAGS"));
  if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS))
    return ReturnNull<ibv_xrcd>(verb, object, Invalid("comp_mask needs IBV_XRCD_INIT_ATTR_FD and IBV_XRCD_INIT_ATTR_OFLAGS"));
  auto core = core::Xrcd::Open(*ToSv(context)->core, attr->fd, attr->oflags);
  if (!core.ok()) return ReturnNull<ibv_xrcd>(verb, object, core.status());
  auto* x = new (std::nothrow) SvXrcd{};
  if (x == nullptr) return ReturnNull<ibv_xrcd>(verb, object, NoMemory("out of memory"));
  x->core = std::move(core.value());
  x->xrcd.context = context;
  SV_LOG(kDebug, "%s: XRC domain %s opened", verb, x->core->from_file() ? "of a file" : "without a file");
  return &x->xrcd;
}

int CloseXrcd(ibv_xrcd* xrcd) {
  SvXrcd* x = ToSv(xrcd);
  if (Status s = x->core->CheckClose(); !s.ok()) return ReturnErrno("ibv_close_xrcd", "xrcd", s);
  delete x;
  return 0;
}

}  // namespace softverbs::abi

SV_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  return CreateSrq("ibv_create_srq", pd, attr->srq_context, &attr->attr);
}
SV_DEFAULT_VERSION(ibv_create_srq);

SV_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  core::SrqAttributes a{attr->max_wr, attr->max_sge, attr->srq_limit};
  Status s = ToSv(srq)->core->Modify(a, static_cast<uint32_t>(mask));
  return s.ok() ? 0 : ReturnErrno("ibv_modify_srq", Name(srq), s);
}
SV_DEFAULT_VERSION(ibv_modify_srq);

SV_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  core::SrqAttributes a = ToSv(srq)->core->Query();
  attr->max_wr = a.max_wr;
  attr->max_sge = a.max_sge;
  attr->srq_limit = a.srq_limit;
  return 0;
}
SV_DEFAULT_VERSION(ibv_query_srq);

SV_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  SvSrq* s = ToSv(srq);
  if (int n = s->core->users().count(); n > 0)
    return ReturnErrno("ibv_destroy_srq", Name(srq), Busy(std::to_string(n) + " QP(s) still receive through this SRQ"));
  ToSv(srq->context)->core->DropAsyncEventsFor(srq);
  pthread_cond_destroy(&srq->cond);
  pthread_mutex_destroy(&srq->mutex);
  ReleaseParentDomain(s->parent_domain);
  delete s;
  return 0;
}
SV_DEFAULT_VERSION(ibv_destroy_srq);

SV_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  auto core = core::Ah::Create(*ToSv(pd)->core, ToCore(*attr));
  if (!core.ok()) return ReturnNull<ibv_ah>("ibv_create_ah", Name(pd), core.status());
  auto* ah = new (std::nothrow) SvAh{};
  if (ah == nullptr) return ReturnNull<ibv_ah>("ibv_create_ah", Name(pd), NoMemory("out of memory"));
  ah->core = std::move(core.value());
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  ah->ah.handle = ah->core->handle();
  const core::AddressVector& av = ah->core->av();
  memcpy(ah->ud.dgid, av.dgid.data(), 16);
  memcpy(ah->ud.sgid, ToSv(pd->context)->core->gids().at(av.sgid_index).gid.data(), 16);
  ah->ud.flow_label = av.flow_label;
  ah->ud.traffic_class = av.traffic_class;
  ah->ud.hop_limit = av.hop_limit;
  ah->ud.on_host = ah->core->on_host();
  return &ah->ah;
}
SV_DEFAULT_VERSION(ibv_create_ah);

SV_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  delete ToSv(ah);
  return 0;
}
SV_DEFAULT_VERSION(ibv_destroy_ah);

SV_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                  ibv_ah_attr* ah_attr) {
  // ibv_init_ah_from_wc(3): on RoCE the reply path comes from the received GRH.
  if (port_num != 1) return ReturnMinusOne("ibv_init_ah_from_wc", "", Invalid("port_num must be 1"));
  if (!(wc->wc_flags & IBV_WC_GRH) || grh == nullptr)
    return ReturnMinusOne("ibv_init_ah_from_wc", "", Invalid("RoCE needs the GRH of the received message (IBV_WC_GRH)"));
  memset(ah_attr, 0, sizeof(*ah_attr));
  ah_attr->is_global = 1;
  ah_attr->port_num = port_num;
  ah_attr->sl = wc->sl;
  ah_attr->grh.hop_limit = 0xff;
  core::Gid dgid;
  // RoCE v2 over IPv4 puts an IPv4 header in the last 20 bytes of the GRH area (IBA annex
  // A17.4.5.2, as transport/send_queue.cc writes it): its addresses are IPv4-mapped GIDs.
  const auto* raw = reinterpret_cast<const uint8_t*>(grh);
  static constexpr uint8_t kZero[20] = {};
  if (memcmp(raw, kZero, 20) == 0 && raw[20] == 0x45) {
    uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memcpy(mapped + 12, raw + 20 + 12, 4);  // IPv4 source
    memcpy(ah_attr->grh.dgid.raw, mapped, 16);
    memcpy(mapped + 12, raw + 20 + 16, 4);  // IPv4 destination
    memcpy(dgid.data(), mapped, 16);
    ah_attr->grh.traffic_class = raw[20 + 1];
  } else {
    ah_attr->grh.dgid = grh->sgid;
    ah_attr->grh.flow_label = be32toh(grh->version_tclass_flow) & 0xfffff;
    ah_attr->grh.traffic_class = static_cast<uint8_t>(be32toh(grh->version_tclass_flow) >> 20);
    memcpy(dgid.data(), grh->dgid.raw, 16);
  }
  // The reply leaves from the GID the message arrived on.
  int index = ToSv(context)->core->gids().Find(dgid);
  if (index < 0) return ReturnMinusOne("ibv_init_ah_from_wc", "", Invalid("the GRH's destination GID is not a GID of this port"));
  ah_attr->grh.sgid_index = static_cast<uint8_t>(index);
  return 0;
}

SV_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

// ibv_attach_mcast(3) / ibv_detach_mcast(3): "0 on success, or the value of errno on failure".
SV_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (gid == nullptr) return ReturnErrno("ibv_attach_mcast", Name(qp), Invalid("gid is NULL"));
  core::Gid mgid;
  memcpy(mgid.data(), gid->raw, 16);
  Status s = ToSv(qp)->core->AttachMcast(mgid, lid);
  return s.ok() ? 0 : ReturnErrno("ibv_attach_mcast", Name(qp), s);
}
SV_DEFAULT_VERSION(ibv_attach_mcast);

SV_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t) {
  if (gid == nullptr) return ReturnErrno("ibv_detach_mcast", Name(qp), Invalid("gid is NULL"));
  core::Gid mgid;
  memcpy(mgid.data(), gid->raw, 16);
  Status s = ToSv(qp)->core->DetachMcast(mgid);
  return s.ok() ? 0 : ReturnErrno("ibv_detach_mcast", Name(qp), s);
}
SV_DEFAULT_VERSION(ibv_detach_mcast);
