// Flow steering rules (ibv_create_flow(3)): the checks a rule passes before it steers frames to
// its QP, and its lifetime. Matching is transport/raw/flow_table.h.
#pragma once

#include <memory>

#include "base/status.h"
#include "transport/raw/flow_rule.h"

namespace softverbs::core {

class FlowActionEsp;
class FlowCounters;
class Qp;

// ibv_flow_attr.flags
namespace flow_flag {
inline constexpr uint32_t kDontTrap = 1u << 1;
inline constexpr uint32_t kEgress = 1u << 2;
}  // namespace flow_flag

// Priorities 0..15, as mlx5 (MLX5_IB_FLOW_LAST_PRIO); a larger one is ENOMEM there too.
inline constexpr uint16_t kMaxFlowPriority = 15;

class Flow {
 public:
  // `port_num` and `flags` as ibv_flow_attr has them; `rule` converted by abi/; `counters` the
  // object of its IBV_FLOW_SPEC_ACTION_COUNT (or null), bound to this flow while it lives;
  // `esp` the ESP action of its IBV_FLOW_SPEC_ACTION_HANDLE (or null), used while it lives.
  static Result<std::unique_ptr<Flow>> Create(Qp& qp, const transport::raw::FlowRule& rule, uint8_t port_num,
                                              uint32_t flags, FlowCounters* counters = nullptr,
                                              FlowActionEsp* esp = nullptr);
  ~Flow();
  Qp& qp() const { return qp_; }

 private:
  friend class RawQp;
  Flow(Qp& qp, uint64_t id, FlowCounters* counters, FlowActionEsp* esp)
      : qp_(qp), id_(id), counters_(counters), esp_(esp) {}
  // Takes the rule off the port (no frame reaches the QP through it after this) and frees its
  // counters and its ESP action's hold. Once: by the destructor, or by the QP when its context
  // closes first (RawQp).
  void Detach();
  Qp& qp_;
  uint64_t id_;
  FlowCounters* counters_;
  FlowActionEsp* esp_;
};

}  // namespace softverbs::core
