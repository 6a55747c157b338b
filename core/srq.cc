#include "core/srq.h"

#include <cstring>

#include "core/context.h"
#include "core/cq.h"
#include "fabric/host/pin_line.h"
#include "base/strings.h"
#include "core/device_limits.h"
#include "base/log.h"
#include "transport/tag_matcher.h"
#include "transport/work_request.h"
#include "fabric/host/process_token.h"

namespace softverbs::core {

Result<std::unique_ptr<Srq>> Srq::Create(Pd& pd, SrqAttributes& attr) {
  auto srq = Make(pd, attr);
  if (srq.ok()) pd.context().Register(srq.value().get());
  return srq;
}

Result<std::unique_ptr<Srq>> Srq::CreateXrc(Pd& pd, SrqAttributes& attr, Xrcd& xrcd, Cq& cq) {
  auto made = Make(pd, attr);
  if (!made.ok()) return made.status();
  std::unique_ptr<Srq> srq = std::move(made.value());
  auto block = pd.context().local().Allocate(sizeof(transport::QpEndpoint));
  if (!block.ok()) return block.status();  // ~Srq gives back the rest
  srq->endpoint_ref_ = *block;
  srq->xrcd_hold_ = xrcd.hold();
  xrcd.users().Acquire();
  srq->cq_ = &cq;
  cq.users().Acquire();
  pd.context().Register(srq.get());
  srq->PublishXrc(cq);
  return srq;
}

void Srq::PublishXrc(Cq& cq) {
  Context& context = pd_.context();
  void* block = context.local().At(endpoint_ref_);
  memset(block, 0, sizeof(transport::QpEndpoint));  // (atomics and locks: all-zero is their initial state)
  auto* e = static_cast<transport::QpEndpoint*>(block);
  e->qp_num = srqn_;
  e->type = 0;  // no request is addressed to it: XRC_RECV QPs lead to it (transport/host/xrc_target.h)
  e->pd = pd_.host_id();
  e->recv_cq = cq.ring_ref();
  e->recv_queue = queue_->ref();
  e->has_srq = 1;
  e->async_fd = context.async_fd();
  e->async_tag = context.async_tag();
  e->xrcd_dev = xrcd_hold_->id().dev;
  e->xrcd_ino = xrcd_hold_->id().ino;
  e->wire.lock.Init();
  // Last: the SRQ number now leads XRC senders to a complete endpoint.
  auto& entry = fabric::EntryOf<fabric::QpEntry>(context.registry().srqs().slot(slot_));
  entry.process_slot.store(context.local().slot(), std::memory_order_relaxed);
  entry.block = endpoint_ref_;
  entry.qp_num.store(srqn_, std::memory_order_release);
}

void Srq::WithdrawXrc() {
  Context& context = pd_.context();
  auto& entry = fabric::EntryOf<fabric::QpEntry>(context.registry().srqs().slot(slot_));
  entry.qp_num.store(0, std::memory_order_release);  // senders stop finding this SRQ
  auto& e = *static_cast<transport::QpEndpoint*>(context.local().At(endpoint_ref_));
  // As ~Qp: senders pin, then check the number; deliveries in flight finish before the ring and
  // the CQ are given back.
  (void)std::atomic_ref<uint32_t>(e.qp_num).exchange(0, std::memory_order_seq_cst);
  fabric::WaitUnpinned(context.registry(), e.users, "ibv_destroy_srq(srq " + Hex(srqn_) + ")");
}

Result<std::unique_ptr<Srq>> Srq::Make(Pd& pd, SrqAttributes& attr) {
  if (attr.max_wr == 0 || attr.max_wr > DeviceLimits::kMaxSrqWr)
    return Invalid("max_wr " + std::to_string(attr.max_wr) + " is outside 1.." +
                   std::to_string(DeviceLimits::kMaxSrqWr) + " (max_srq_wr)");
  if (attr.max_sge == 0 || attr.max_sge > DeviceLimits::kMaxSrqSge)
    return Invalid("max_sge " + std::to_string(attr.max_sge) + " is outside 1.." +
                   std::to_string(DeviceLimits::kMaxSrqSge) + " (max_srq_sge)");
  // ibv_create_srq(3): srq_limit is ignored at creation; the SRQ starts unarmed.
  auto queue = RecvQueue::Create(pd.context().local(), attr.max_wr, attr.max_sge, pd.context().async_fd(), pd.context().async_tag());
  if (!queue.ok()) return queue.status();
  auto slot = pd.context().registry().srqs().Allocate(fabric::ProcessToken::Self());
  if (!slot.ok())
    return Status(ENOMEM, "the device limit max_srq " + std::to_string(DeviceLimits::kMaxSrq) +
                              " is reached: no SRQ number left (" + slot.status().rule() + ")");
  attr.srq_limit = 0;
  pd.users().Acquire();
  return std::unique_ptr<Srq>(new Srq(pd, attr, *slot, std::move(queue.value())));
}

Result<std::unique_ptr<Srq>> Srq::CreateTm(Pd& pd, SrqAttributes& attr, Cq& cq, const TmAttributes& tm) {
  // The kernel's mlx5 create_srq: a list longer than the device's is EINVAL; mlx5's command QP
  // holds max_ops list operations, bounded as any send queue.
  if (tm.max_num_tags > DeviceLimits::kMaxTmTags)
    return Invalid("tm_cap.max_num_tags " + std::to_string(tm.max_num_tags) + " exceeds tm_caps.max_num_tags " +
                   std::to_string(DeviceLimits::kMaxTmTags));
  if (tm.max_ops > DeviceLimits::kMaxQpWr)
    return Invalid("tm_cap.max_ops " + std::to_string(tm.max_ops) + " exceeds tm_caps.max_ops " +
                   std::to_string(DeviceLimits::kMaxQpWr));
  auto made = Make(pd, attr);
  if (!made.ok()) return made.status();
  std::unique_ptr<Srq> srq = std::move(made.value());
  const size_t bytes = transport::TagTableBytes(tm.max_num_tags);
  auto block = pd.context().local().Allocate(bytes);
  if (!block.ok()) return block.status();  // ~Srq gives back the rest
  auto* table = static_cast<transport::TagTable*>(pd.context().local().At(*block));
  memset(static_cast<void*>(table), 0, bytes);
  transport::TagTableInit(*table, tm.max_num_tags);
  srq->tm_ref_ = *block;
  srq->tm_ = tm;
  srq->cq_ = &cq;
  cq.users().Acquire();
  srq->queue_->ring().tm = *block;  // senders match from now on
  pd.context().Register(srq.get());
  return srq;
}

Result<uint32_t> Srq::PostOp(const SrqOp& op, uint32_t index) {
  using namespace transport;
  if (!is_tm()) return Invalid("the SRQ is not a tag matching SRQ (IBV_SRQT_TM)");
  // mlx5_post_srq_ops: a list longer than the command QP's queue overflows it (ENOMEM).
  if (index >= tm_.max_ops)
    return Status(ENOMEM, "more list operations than tm_cap.max_ops " + std::to_string(tm_.max_ops));
  auto& table = *static_cast<TagTable*>(pd_.context().local().At(tm_ref_));
  std::lock_guard lock(ops_mu_);
  Completion c;
  c.wr_id = op.wr_id;
  TagOpResult r;
  switch (op.opcode) {
    case srq_op::kTagAdd:
      // ibv_post_srq_ops(3): "SGE list size is limited by max_sge" (tm_caps.max_sge 1).
      if (op.num_sge > 1) return Invalid("tm.add.num_sge " + std::to_string(op.num_sge) + " exceeds tm_caps.max_sge 1");
      // mlx5_post_srq_ops: "tag matching list is full" -> ENOMEM, before anything is posted.
      if (TagPosted(table) >= tm_.max_num_tags)
        return Status(ENOMEM, "the tag matching list is full (tm_cap.max_num_tags " + std::to_string(tm_.max_num_tags) + ")");
      if (op.flags & srq_op::kTmSync) TagSync(table, op.unexpected_cnt);
      r = TagAdd(table, TagSpec{op.tag, op.mask, op.recv_wr_id, op.num_sge ? op.sge->addr : 0,
                                op.num_sge ? op.sge->length : 0, op.num_sge ? op.sge->lkey : 0, op.num_sge});
      if (!r.ok)
        return Status(ENOMEM, "the tag matching list is full (tm_cap.max_num_tags " + std::to_string(tm_.max_num_tags) + ")");
      c.opcode = wc_opcode::kTmAdd;
      break;
    case srq_op::kTagDel:
      if (op.handle >= tm_.max_num_tags)
        return Invalid("tm.handle " + std::to_string(op.handle) + " was never returned by IBV_WR_TAG_ADD");
      if (op.flags & srq_op::kTmSync) TagSync(table, op.unexpected_cnt);
      r = TagRemove(table, op.handle);
      c.opcode = wc_opcode::kTmDel;
      // ibv_post_srq_ops(3): a tag consumed meanwhile (or not posted) fails with IBV_WC_TM_ERR.
      if (!r.ok) {
        c.status = wc_status::kTmErr;
        SV_LOG(kDebug, "ibv_post_srq_ops(srq 0x%x): IBV_WR_TAG_DEL of handle %u, which is not in the list: "
               "IBV_WC_TM_ERR", srqn_, op.handle);
      }
      break;
    case srq_op::kTagSync:
      if (op.flags & srq_op::kTmSync) TagSync(table, op.unexpected_cnt);
      c.opcode = wc_opcode::kTmSync;
      break;
    default:
      return Invalid("opcode " + std::to_string(op.opcode) + " is not an ibv_ops_wr_opcode");
  }
  if (r.sync_req) c.wc_flags |= wc_flag::kTmSyncReq;
  // IBV_OPS_SIGNALED asks for a completion on the SRQ's CQ (a failed DEL completes only then).
  if ((op.flags & srq_op::kSignaled) && !cq_->Push(c))
    SV_LOG(kError, "ibv_post_srq_ops(srq 0x%x): the CQ is full: the completion of wr_id %llu is lost",
           srqn_, static_cast<unsigned long long>(op.wr_id));
  return r.handle;
}

Srq::~Srq() {
  pd_.context().Unregister(this);
  if (tm_ref_.valid()) {
    queue_->ring().tm = {};
    cq_->users().Release();
    pd_.context().local().Free(tm_ref_, transport::TagTableBytes(tm_.max_num_tags));
  }
  if (endpoint_ref_.valid()) {  // (an XRC SRQ)
    if (cq_ != nullptr) {
      WithdrawXrc();
      cq_->users().Release();
      xrcd_hold_->users().Release();  // (the handle may be closed by now)
    }
    pd_.context().local().Free(endpoint_ref_, sizeof(transport::QpEndpoint));
  }
  pd_.context().registry().srqs().Free(slot_, fabric::ProcessToken::Self());
  pd_.users().Release();
}

Status Srq::Modify(const SrqAttributes& attr, uint32_t mask) {
  // ibv_modify_srq(3): the mask "is either 0 or the bitwise OR of" IBV_SRQ_MAX_WR, IBV_SRQ_LIMIT.
  if (mask & ~(srq_attr::kMaxWr | srq_attr::kLimit))
    return Invalid("srq_attr_mask has bits beyond IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT");
  std::lock_guard lock(mu_);
  // Check everything before changing anything.
  const uint32_t max_wr = (mask & srq_attr::kMaxWr) ? attr.max_wr : attr_.max_wr;
  if ((mask & srq_attr::kMaxWr) && (attr.max_wr == 0 || attr.max_wr > DeviceLimits::kMaxSrqWr))
    return Invalid("max_wr " + std::to_string(attr.max_wr) + " is outside 1.." + std::to_string(DeviceLimits::kMaxSrqWr));
  // ibv_modify_srq(3): the limit must not exceed the SRQ's size.
  if ((mask & srq_attr::kLimit) && attr.srq_limit > max_wr)
    return Invalid("srq_limit " + std::to_string(attr.srq_limit) + " exceeds max_wr " + std::to_string(max_wr));
  if (mask & srq_attr::kMaxWr) {
    // Resizing is offered (IBV_DEVICE_SRQ_RESIZE); a queue never shrinks below what is posted.
    SV_RETURN_IF_ERROR(queue_->Resize(max_wr));
    attr_.max_wr = max_wr;
  }
  if (mask & srq_attr::kLimit) queue_->SetLimit(attr.srq_limit);
  return Status::Ok();
}

SrqAttributes Srq::Query() const {
  std::lock_guard lock(mu_);
  SrqAttributes a = attr_;
  fabric::RobustLock ring_lock(queue_->ring().lock);
  a.srq_limit = queue_->ring().srq_limit;
  return a;
}

}  // namespace softverbs::core
