// The function tables of a context: ibv_context_ops (post/poll/notify and the legacy slots) and
// verbs_context (the extended verbs that verbs.h reaches through verbs_get_ctx_op). Every slot is
// filled: an operation softverbs does not offer fails through its verb's C convention with
// EOPNOTSUPP and a log line; nothing is ever a NULL call (DESIGN.md section 2).
#include <cstring>

#include "abi/common/errno_convention.h"
#include "abi/common/raw_enum.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "base/clock.h"

namespace softverbs::abi {

namespace {

// ----- The legacy slots of ibv_context_ops that no current libibverbs calls.
int CompatQueryDevice(ibv_context*, ibv_device_attr*) {
  return ReturnErrno("ibv_context_ops._compat_query_device", "", Unsupported("the legacy ops slot"));
}
int CompatQueryPort(ibv_context*, uint8_t, _compat_ibv_port_attr*) {
  return ReturnErrno("ibv_context_ops._compat_query_port", "", Unsupported("the legacy ops slot"));
}
void* CompatSlot() { return ReturnNull("ibv_context_ops._compat_*", "", Unsupported("the legacy ops slot")); }

// ----- verbs_context operations.
// ibv_query_rt_values_ex(3): the device clock now, in the units of completion timestamps. As
// hardware providers do, the raw clock is the whole counter in tv_nsec (tv_sec 0), and
// comp_mask comes back with the values filled in.
int QueryRtValues(ibv_context*, ibv_values_ex* values) {
  uint32_t filled = 0;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    values->raw_clock.tv_sec = 0;
    values->raw_clock.tv_nsec = static_cast<long>(DeviceClockNow());
    filled |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = filled;
  return 0;
}
// ibv_modify_cq(3): IBV_CQ_MODERATE is the one attribute (libibverbs' ibv_cmd_modify_cq refuses
// a mask at or above IBV_CQ_ATTR_RESERVED, the kernel's ib_uverbs_ex_modify_cq a mask of 0:
// EINVAL); the limits are checked by the core against cq_mod_caps. Returns an errno.
int ModifyCq(ibv_cq* cq, ibv_modify_cq_attr* attr) {
  if (attr == nullptr) return ReturnErrno("ibv_modify_cq", Name(cq), Invalid("attr is NULL"));
  if (attr->attr_mask == 0 || attr->attr_mask >= IBV_CQ_ATTR_RESERVED)
    return ReturnErrno("ibv_modify_cq", Name(cq),
                       Invalid("attr_mask " + std::to_string(attr->attr_mask) +
                               " is not IBV_CQ_MODERATE (the only attribute ibv_modify_cq(3) has)"));
  Status s = ToSv(cq)->core->Moderate(attr->moderate.cq_count, attr->moderate.cq_period);
  return s.ok() ? 0 : ReturnErrno("ibv_modify_cq", Name(cq), s);
}

void PlaceholderSlot() {}  // "ABI_placeholder" slots of verbs_context: never called by libibverbs
// ibv_post_srq_ops(3): the list in order; the first refused operation is *bad_op (mlx5_post_srq_ops).
int PostSrqOps(ibv_srq* srq, ibv_ops_wr* op, ibv_ops_wr** bad_op) {
  uint32_t index = 0;
  for (; op != nullptr; op = op->next, ++index) {
    core::SrqOp o;
    o.wr_id = op->wr_id;
    o.opcode = RawEnum(op->opcode);  // refused below if no IBV_WR_TAG_* (never loaded as the enum)
    o.flags = static_cast<uint32_t>(op->flags);
    o.unexpected_cnt = op->tm.unexpected_cnt;
    o.handle = op->tm.handle;
    o.recv_wr_id = op->tm.add.recv_wr_id;
    o.tag = op->tm.add.tag;
    o.mask = op->tm.add.mask;
    transport::RecvSge sge{};
    if (o.opcode == IBV_WR_TAG_ADD && op->tm.add.num_sge > 0 && op->tm.add.sg_list != nullptr) {
      sge = {op->tm.add.sg_list->addr, op->tm.add.sg_list->length, op->tm.add.sg_list->lkey};
      o.sge = &sge;
      o.num_sge = static_cast<uint32_t>(op->tm.add.num_sge);
    }
    auto handle = ToSv(srq)->core->PostOp(o, index);
    if (!handle.ok()) {
      *bad_op = op;
      return ReturnErrno("ibv_post_srq_ops", Name(srq), handle.status());
    }
    if (o.opcode == IBV_WR_TAG_ADD) op->tm.handle = *handle;
  }
  return 0;
}
// ibv_modify_qp_rate_limit(3): IBV_QP_RATE_LIMIT with the burst shape, as mlx5 sends it
// (mlx5_modify_qp_rate_limit: a comp_mask is EINVAL; the rest is ibv_modify_qp's rule, so the QP
// must be in RTS -- RTS->RTS is the transition that takes it). Returns an errno.
int ModifyQpRateLimit(ibv_qp* qp, ibv_qp_rate_limit_attr* attr) {
  if (attr == nullptr) return ReturnErrno("ibv_modify_qp_rate_limit", Name(qp), Invalid("attr is NULL"));
  if (attr->comp_mask != 0)
    return ReturnErrno("ibv_modify_qp_rate_limit", Name(qp),
                       Invalid("comp_mask " + std::to_string(attr->comp_mask) + " names no field (it must be 0)"));
  if (ToSv(qp)->core == nullptr)  // an ibv_open_qp handle of an XRC target: no send queue
    return ReturnErrno("ibv_modify_qp_rate_limit", Name(qp),
                       NotSupported("an XRC_RECV QP sends nothing: packet_pacing_caps.supported_qpts has no XRC_RECV"));
  core::QpAttributes a;
  a.rate_limit = attr->rate_limit;
  a.max_burst_sz = attr->max_burst_sz;
  a.typical_pkt_sz = attr->typical_pkt_sz;
  Status s = ToSv(qp)->core->Modify(a, core::attr::kRateLimit);
  return s.ok() ? 0 : ReturnErrno("ibv_modify_qp_rate_limit", Name(qp), s);
}
}  // namespace

void InitContextOps(SvContext* ctx) {
  ibv_context_ops& o = ctx->vctx.context.ops;
  o._compat_query_device = CompatQueryDevice;
  o._compat_query_port = CompatQueryPort;
  o._compat_alloc_pd = o._compat_dealloc_pd = o._compat_reg_mr = o._compat_rereg_mr =
      o._compat_dereg_mr = o._compat_create_cq = o._compat_cq_event = o._compat_resize_cq =
          o._compat_destroy_cq = o._compat_create_srq = o._compat_modify_srq = o._compat_query_srq =
              o._compat_destroy_srq = o._compat_create_qp = o._compat_query_qp = o._compat_modify_qp =
                  o._compat_destroy_qp = o._compat_create_ah = o._compat_destroy_ah =
                      o._compat_attach_mcast = o._compat_detach_mcast = o._compat_async_event = CompatSlot;
  o.alloc_mw = AllocMw;
  o.bind_mw = BindMw;
  o.dealloc_mw = DeallocMw;
  o.poll_cq = PollCq;
  o.req_notify_cq = ReqNotifyCq;
  o.post_srq_recv = PostSrqRecv;
  o.post_send = PostSend;
  o.post_recv = PostRecv;

  verbs_context& v = ctx->vctx;
  v.query_port = QueryPort;
  v.advise_mr = AdviseMr;
  v.alloc_null_mr = AllocNullMr;
  v.read_counters = ReadCounters;
  v.attach_counters_point_flow = AttachCountersPointFlow;
  v.create_counters = CreateCounters;
  v.destroy_counters = DestroyCounters;
  v.reg_dm_mr = RegDmMr;
  v.alloc_dm = AllocDm;
  v.free_dm = FreeDm;
  v.modify_flow_action_esp = ModifyFlowActionEsp;
  v.destroy_flow_action = DestroyFlowAction;
  v.create_flow_action_esp = CreateFlowActionEsp;
  v.modify_qp_rate_limit = ModifyQpRateLimit;
  v.alloc_parent_domain = AllocParentDomain;
  v.dealloc_td = DeallocTd;
  v.alloc_td = AllocTd;
  v.modify_cq = ModifyCq;
  v.post_srq_ops = PostSrqOps;
  v.destroy_rwq_ind_table = DestroyRwqIndTable;
  v.create_rwq_ind_table = CreateRwqIndTable;
  v.destroy_wq = DestroyWq;
  v.modify_wq = ModifyWq;
  v.create_wq = CreateWq;
  v.query_rt_values = QueryRtValues;
  v.create_cq_ex = CreateCqEx;
  v.priv = nullptr;  // rdma-core's private extension: not used by applications
  v.query_device_ex = QueryDeviceEx;
  v.ibv_destroy_flow = DestroyFlow;
  v.ABI_placeholder2 = PlaceholderSlot;
  v.ibv_create_flow = CreateFlow;
  v.ABI_placeholder1 = PlaceholderSlot;
  v.open_qp = OpenQp;
  v.create_qp_ex = CreateQpEx;
  v.get_srq_num = GetSrqNum;
  v.create_srq_ex = CreateSrqEx;
  v.open_xrcd = OpenXrcd;
  v.close_xrcd = CloseXrcd;
}

}  // namespace softverbs::abi
