#include "core/flow.h"

#include "core/counters.h"
#include "core/qp.h"
#include "core/raw_qp.h"

namespace softverbs::core {
namespace {

using transport::raw::FlowRule;
using transport::raw::FlowType;

bool HasSpecs(const transport::raw::HeaderMatch& h) {
  return h.eth.present || h.ipv4.present || h.ipv6.present || h.tcp.present || h.udp.present;
}

Status CheckRule(const FlowRule& rule, uint8_t port_num, uint32_t flags) {
  if (port_num != 1) return Invalid("port " + std::to_string(port_num) + " is not a port of softverbs0 (it has port 1)");
  if (flags & ~(flow_flag::kDontTrap | flow_flag::kEgress)) return Invalid("flags has unknown bits");
  if (flags & flow_flag::kEgress)
    return NotSupported("IBV_FLOW_ATTR_FLAGS_EGRESS rules (egress actions such as ESP) are not offered");
  // ibv_create_flow(3) note 4.
  if ((flags & flow_flag::kDontTrap) && rule.type != FlowType::kNormal)
    return Invalid("only IBV_FLOW_ATTR_NORMAL rules take IBV_FLOW_ATTR_FLAGS_DONT_TRAP (ibv_create_flow(3) note 4)");
  if (rule.priority > kMaxFlowPriority)
    return Status(ENOMEM, "priority " + std::to_string(rule.priority) + " is above the last one, " +
                              std::to_string(kMaxFlowPriority) + " (as mlx5: MLX5_IB_FLOW_LAST_PRIO)");
  if (rule.type != FlowType::kNormal && (HasSpecs(rule.outer) || rule.vxlan_vni.present || HasSpecs(rule.inner)))
    return Invalid("ALL_DEFAULT, MC_DEFAULT and SNIFFER rules take no header specifications");
  if (rule.outer.ipv4.present && rule.outer.ipv6.present)
    return Invalid("a rule matches IPv4 or IPv6, not both");
  if (rule.outer.tcp.present && rule.outer.udp.present) return Invalid("a rule matches TCP or UDP, not both");
  if (rule.drop && rule.has_tag) return Invalid("a DROP rule cannot also tag the frames it drops");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Flow>> Flow::Create(Qp& qp, const FlowRule& rule, uint8_t port_num, uint32_t flags,
                                           FlowCounters* counters) {
  // ibv_create_flow(3) note 1: UD or RAW_PACKET QPs. On an Ethernet port, mlx5 steers UD QPs
  // only for IPoIB (an InfiniBand port), so UD is refused as not offered.
  if (qp.type() == QpType::kUd)
    return NotSupported("flow rules on UD QPs steer IPoIB traffic of InfiniBand ports; softverbs0 is Ethernet");
  if (qp.type() != QpType::kRawPacket || qp.raw() == nullptr)
    return Invalid(std::string("flow rules attach to RAW_PACKET (or UD) QPs, not ") + QpTypeName(qp.type()) +
                   " (ibv_create_flow(3) note 1)");
  SV_RETURN_IF_ERROR(CheckRule(rule, port_num, flags));
  FlowRule r = rule;
  r.dont_trap = (flags & flow_flag::kDontTrap) != 0;
  if (counters != nullptr) {
    auto counter = counters->Bind();
    if (!counter.ok()) return counter.status();
    r.counter = std::move(counter.value());
  }
  RawQp& raw = *qp.raw();
  std::unique_ptr<Flow> flow(new Flow(qp, raw.port().AddRule(r, &raw), counters));
  raw.AddFlow(flow.get());
  return flow;
}

Flow::~Flow() {
  if (qp_.raw()->RemoveFlow(this)) Detach();
}

void Flow::Detach() {
  qp_.raw()->port().RemoveRule(id_);
  if (counters_ != nullptr) counters_->Unbind();
}

}  // namespace softverbs::core
