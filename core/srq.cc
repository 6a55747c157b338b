#include "core/srq.h"

#include <cstring>

#include "core/context.h"
#include "core/cq.h"
#include "fabric/host/pin_line.h"
#include "base/strings.h"
#include "core/device_limits.h"
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

Srq::~Srq() {
  pd_.context().Unregister(this);
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
