#include "core/srq.h"

#include "core/context.h"
#include "core/device_limits.h"
#include "fabric/host/process_token.h"

namespace softverbs::core {

Result<std::unique_ptr<Srq>> Srq::Create(Pd& pd, SrqAttributes& attr) {
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
  std::unique_ptr<Srq> srq(new Srq(pd, attr, *slot, std::move(queue.value())));
  pd.context().Register(srq.get());
  return srq;
}

Srq::~Srq() {
  pd_.context().Unregister(this);
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
