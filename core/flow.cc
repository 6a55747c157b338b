#include "core/flow.h"

#include "core/counters.h"
#include "core/flow_action.h"
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
  // mlx5_ib_create_flow: the leftovers tables have no transmit side.
  if ((flags & flow_flag::kEgress) && (rule.type == FlowType::kAllDefault || rule.type == FlowType::kMcDefault))
    return Invalid("ALL_DEFAULT and MC_DEFAULT rules take no IBV_FLOW_ATTR_FLAGS_EGRESS (as mlx5)");
  // ibv_create_flow(3) note 4.
  if ((flags & flow_flag::kDontTrap) && rule.type != FlowType::kNormal)
    return Invalid("only IBV_FLOW_ATTR_NORMAL rules take IBV_FLOW_ATTR_FLAGS_DONT_TRAP (ibv_create_flow(3) note 4)");
  if (rule.priority > kMaxFlowPriority)
    return Status(ENOMEM, "priority " + std::to_string(rule.priority) + " is above the last one, " +
                              std::to_string(kMaxFlowPriority) + " (as mlx5: MLX5_IB_FLOW_LAST_PRIO)");
  if (rule.type != FlowType::kNormal &&
      (HasSpecs(rule.outer) || rule.vxlan_vni.present || HasSpecs(rule.inner) || rule.esp_spi.present))
    return Invalid("ALL_DEFAULT, MC_DEFAULT and SNIFFER rules take no header specifications");
  if (rule.outer.ipv4.present && rule.outer.ipv6.present)
    return Invalid("a rule matches IPv4 or IPv6, not both");
  if (rule.outer.tcp.present && rule.outer.udp.present) return Invalid("a rule matches TCP or UDP, not both");
  if (rule.drop && rule.has_tag) return Invalid("a DROP rule cannot also tag the frames it drops");
  return Status::Ok();
}

// An ESP action in a rule, as mlx5 (fs.c is_valid_esp_aes_gcm): an egress crypto rule matches
// an ESP SPI and neither drops nor tags. The rule's direction decides what the action does --
// mlx5_ib's parse_flow_flow_action sets ENCRYPT on an egress rule and DECRYPT on an ingress one
// whatever the action's IB_UVERBS_FLOW_ACTION_ESP_FLAGS_ENCRYPT says, and neither uverbs nor
// mlx5_ib refuses the pair -- so softverbs accepts either action in either direction (egress
// tables encrypt, the receive side decrypts: transport/raw).
Status CheckEsp(const FlowRule& rule, uint32_t flags, const FlowActionEsp&) {
  const bool egress = (flags & flow_flag::kEgress) != 0;
  if (rule.type != FlowType::kNormal) return Invalid("ESP actions go on IBV_FLOW_ATTR_NORMAL rules");
  if (egress && (!rule.esp_spi.present || rule.esp_spi.mask == 0))
    return Invalid("an egress ESP rule must match an SPI (IBV_FLOW_SPEC_ESP with a non-zero mask), as mlx5");
  if (egress && (rule.drop || rule.has_tag)) return Invalid("an egress ESP rule neither drops nor tags, as mlx5");
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Flow>> Flow::Create(Qp& qp, const FlowRule& rule, uint8_t port_num, uint32_t flags,
                                           FlowCounters* counters, FlowActionEsp* esp) {
  // ibv_create_flow(3) note 1: UD or RAW_PACKET QPs. On an Ethernet port, mlx5 steers UD QPs
  // only for IPoIB (an InfiniBand port), so UD is refused as not offered.
  if (qp.type() == QpType::kUd)
    return NotSupported("flow rules on UD QPs steer IPoIB traffic of InfiniBand ports; softverbs0 is Ethernet");
  if (qp.type() != QpType::kRawPacket || qp.raw() == nullptr)
    return Invalid(std::string("flow rules attach to RAW_PACKET (or UD) QPs, not ") + QpTypeName(qp.type()) +
                   " (ibv_create_flow(3) note 1)");
  SV_RETURN_IF_ERROR(CheckRule(rule, port_num, flags));
  if (esp != nullptr) SV_RETURN_IF_ERROR(CheckEsp(rule, flags, *esp));
  FlowRule r = rule;
  r.dont_trap = (flags & flow_flag::kDontTrap) != 0;
  // A sniffer mirrors both directions already; EGRESS changes only NORMAL rules.
  r.egress = (flags & flow_flag::kEgress) != 0 && rule.type == FlowType::kNormal;
  if (counters != nullptr) {
    auto counter = counters->Bind();
    if (!counter.ok()) return counter.status();
    r.counter = std::move(counter.value());
  }
  if (esp != nullptr) {
    r.esp = esp->sa();
    esp->flows().Acquire();
  }
  RawQp& raw = *qp.raw();
  std::unique_ptr<Flow> flow(new Flow(qp, raw.port().AddRule(r, &raw), counters, esp));
  raw.AddFlow(flow.get());
  return flow;
}

Flow::~Flow() {
  if (qp_.raw()->RemoveFlow(this)) Detach();
}

void Flow::Detach() {
  qp_.raw()->port().RemoveRule(id_);
  if (counters_ != nullptr) counters_->Unbind();
  if (esp_ != nullptr) esp_->flows().Release();
}

}  // namespace softverbs::core
