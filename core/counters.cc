#include "core/counters.h"

#include <algorithm>

namespace softverbs::core {

Status FlowCounters::Describe(uint32_t description, uint32_t index) {
  // mlx5_attach_counters_point_flow: a description other than PACKETS or BYTES is ENOTSUP.
  if (description != counter_desc::kPackets && description != counter_desc::kBytes)
    return NotSupported("counter_desc " + std::to_string(description) +
                        " is not IBV_COUNTER_PACKETS or IBV_COUNTER_BYTES (the flow counters a NIC keeps)");
  std::lock_guard lock(mu_);
  // mlx5_attach_counters_point_flow: "The counter is bound to a flow, attach is not allowed".
  if (bound_) return Busy("the counters are bound to a flow: descriptions are attached before ibv_create_flow");
  descriptions_.push_back({description, index});
  entries_needed_ = std::max<uint64_t>(entries_needed_, uint64_t{index} + 1);
  return Status::Ok();
}

Result<std::shared_ptr<transport::raw::FlowCounter>> FlowCounters::Bind() {
  std::lock_guard lock(mu_);
  // The kernel's mlx5 flow_counters_set_data: counters already bound to a flow are EINVAL.
  if (bound_) return Invalid("the counters already count for another flow (one flow per counters object, as mlx5)");
  bound_ = true;
  return counter_;
}

void FlowCounters::Unbind() {
  std::lock_guard lock(mu_);
  bound_ = false;
}

bool FlowCounters::bound() const {
  std::lock_guard lock(mu_);
  return bound_;
}

Status FlowCounters::Read(std::span<uint64_t> out, uint32_t flags) const {
  // The kernel's UVERBS_METHOD_COUNTERS_READ takes IB_UVERBS_READ_COUNTERS_PREFER_CACHED only.
  if (flags & ~kReadCountersPreferCached)
    return Invalid("flags has bits other than IBV_READ_COUNTERS_ATTR_PREFER_CACHED");
  std::lock_guard lock(mu_);
  // mlx5_ib_read_counters: a buffer without room for the highest attached index is EINVAL.
  if (out.size() < entries_needed_)
    return Invalid("ncounters " + std::to_string(out.size()) + " is below the " + std::to_string(entries_needed_) +
                   " entries the attached descriptions index");
  // Software counters are always current: a cached read is an exact one.
  const uint64_t values[2] = {counter_->packets.load(std::memory_order_relaxed),
                              counter_->bytes.load(std::memory_order_relaxed)};
  std::fill(out.begin(), out.end(), 0);
  for (const Description& d : descriptions_) out[d.index] += values[d.what];
  return Status::Ok();
}

}  // namespace softverbs::core
