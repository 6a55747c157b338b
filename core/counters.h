// Flow counters (ibv_create_counters(3), ibv_attach_counters_point_flow(3), ibv_read_counters(3)):
// a counters object, the descriptions attached to it (which value goes to which index of the
// read buffer), and the one flow it counts for. mlx5's rules: descriptions are attached before
// the object is bound to a flow by ibv_create_flow's IBV_FLOW_SPEC_ACTION_COUNT (the "static
// binding"); a bound object takes no more descriptions (EBUSY) and no second flow (EINVAL).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "base/status.h"
#include "transport/raw/flow_counter.h"

namespace softverbs::core {

// enum ibv_counter_description
namespace counter_desc {
inline constexpr uint32_t kPackets = 0;  // IBV_COUNTER_PACKETS
inline constexpr uint32_t kBytes = 1;    // IBV_COUNTER_BYTES
}  // namespace counter_desc

// enum ibv_read_counters_flags
inline constexpr uint32_t kReadCountersPreferCached = 1u << 0;

class FlowCounters {
 public:
  // ibv_attach_counters_point_flow with flow NULL: `description`'s value is added into
  // `index` of the read buffer (several descriptions may share an index: they add up).
  Status Describe(uint32_t description, uint32_t index);
  // IBV_FLOW_SPEC_ACTION_COUNT of a new flow: the counter its rule adds to.
  Result<std::shared_ptr<transport::raw::FlowCounter>> Bind();
  // The flow is destroyed. The values stay (the hardware counter object lives as long as the
  // counters object); a later flow may bind it again and counts on from them.
  void Unbind();
  bool bound() const;
  // ibv_read_counters: `out` (its ncounters entries) zeroed, then each description's value
  // added at its index. EINVAL for unknown flags or an `out` shorter than the highest index.
  Status Read(std::span<uint64_t> out, uint32_t flags) const;

 private:
  struct Description {
    uint32_t what, index;
  };
  mutable std::mutex mu_;
  std::vector<Description> descriptions_;
  uint64_t entries_needed_ = 0;  // the highest index + 1 (64 bits: index may be UINT32_MAX)
  bool bound_ = false;
  std::shared_ptr<transport::raw::FlowCounter> counter_ = std::make_shared<transport::raw::FlowCounter>();
};

}  // namespace softverbs::core
