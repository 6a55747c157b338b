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
  auto slot = pd.context().registry().srqs().Allocate(fabric::ProcessToken::Self());
  if (!slot.ok()) return Status(ENOMEM, "no SRQ number left: " + slot.status().rule());
  attr.srq_limit = 0;
  pd.users().Acquire();
  return std::unique_ptr<Srq>(new Srq(pd, attr, *slot));
}

Srq::~Srq() {
  pd_.context().registry().srqs().Free(slot_, fabric::ProcessToken::Self());
  pd_.users().Release();
}

Status Srq::Modify(const SrqAttributes& attr, uint32_t mask) {
  // ibv_modify_srq(3): the mask "is either 0 or the bitwise OR of" IBV_SRQ_MAX_WR, IBV_SRQ_LIMIT.
  if (mask & ~(srq_attr::kMaxWr | srq_attr::kLimit))
    return Invalid("srq_attr_mask has bits beyond IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT");
  SrqAttributes next = attr_;
  if (mask & srq_attr::kMaxWr) {
    // Resizing is offered (IBV_DEVICE_SRQ_RESIZE); a queue never shrinks below what is posted.
    if (attr.max_wr == 0 || attr.max_wr > DeviceLimits::kMaxSrqWr)
      return Invalid("max_wr " + std::to_string(attr.max_wr) + " is outside 1.." +
                     std::to_string(DeviceLimits::kMaxSrqWr));
    next.max_wr = attr.max_wr;
  }
  if (mask & srq_attr::kLimit) {
    // ibv_modify_srq(3): the limit must not exceed the SRQ's size.
    if (attr.srq_limit > next.max_wr)
      return Invalid("srq_limit " + std::to_string(attr.srq_limit) + " exceeds max_wr " +
                     std::to_string(next.max_wr));
    next.srq_limit = attr.srq_limit;
  }
  attr_ = next;
  return Status::Ok();
}

}  // namespace softverbs::core
