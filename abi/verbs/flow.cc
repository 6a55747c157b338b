// ibv_create_flow / ibv_destroy_flow (ibv_create_flow(3)): struct ibv_flow_attr and its
// ibv_flow_spec_* list converted into the transport's rule (transport/raw/flow_rule.h); the
// rule's checks are core/flow.cc.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "abi/common/errno_convention.h"
#include "abi/verbs/objects.h"
#include "abi/verbs/ops.h"
#include "core/flow.h"
#include "core/flow_action.h"

namespace softverbs::abi {
namespace {

using transport::raw::FlowRule;
using transport::raw::HeaderMatch;

struct SvFlow {
  ibv_flow flow;
  std::unique_ptr<core::Flow> core;
};

void Eth(const ibv_flow_eth_filter& f, transport::raw::EthFields* out) {
  memcpy(out->dst_mac, f.dst_mac, 6);
  memcpy(out->src_mac, f.src_mac, 6);
  out->ether_type = ntohs(f.ether_type);
  out->vlan_tag = ntohs(f.vlan_tag);
}

void Ipv4(const ibv_flow_ipv4_ext_filter& f, transport::raw::Ipv4Fields* out) {
  out->src_be = f.src_ip;
  out->dst_be = f.dst_ip;
  out->proto = f.proto;
  out->tos = f.tos;
  out->ttl = f.ttl;
  out->flags = f.flags;
}

void Ipv6(const ibv_flow_ipv6_filter& f, transport::raw::Ipv6Fields* out) {
  memcpy(out->src, f.src_ip, 16);
  memcpy(out->dst, f.dst_ip, 16);
  out->flow_label = ntohl(f.flow_label);
  out->next_hdr = f.next_hdr;
  out->traffic_class = f.traffic_class;
  out->hop_limit = f.hop_limit;
}

void Ports(const ibv_flow_tcp_udp_filter& f, transport::raw::L4Fields* out) {
  out->src_port = ntohs(f.src_port);
  out->dst_port = ntohs(f.dst_port);
}

// The size a spec of `type` must have (its struct in <infiniband/verbs.h>); 0: not a type.
size_t SpecSize(uint32_t type) {
  switch (type & ~IBV_FLOW_SPEC_INNER) {
    case IBV_FLOW_SPEC_ETH: return sizeof(ibv_flow_spec_eth);
    case IBV_FLOW_SPEC_IPV4: return sizeof(ibv_flow_spec_ipv4);
    case IBV_FLOW_SPEC_IPV4_EXT: return sizeof(ibv_flow_spec_ipv4_ext);
    case IBV_FLOW_SPEC_IPV6: return sizeof(ibv_flow_spec_ipv6);
    case IBV_FLOW_SPEC_TCP:
    case IBV_FLOW_SPEC_UDP: return sizeof(ibv_flow_spec_tcp_udp);
    case IBV_FLOW_SPEC_VXLAN_TUNNEL: return sizeof(ibv_flow_spec_tunnel);
    case IBV_FLOW_SPEC_ACTION_TAG: return sizeof(ibv_flow_spec_action_tag);
    case IBV_FLOW_SPEC_ACTION_DROP: return sizeof(ibv_flow_spec_action_drop);
    case IBV_FLOW_SPEC_ACTION_COUNT: return sizeof(ibv_flow_spec_counter_action);
    case IBV_FLOW_SPEC_ESP: return sizeof(ibv_flow_spec_esp);
    case IBV_FLOW_SPEC_ACTION_HANDLE: return sizeof(ibv_flow_spec_action_handle);
    default: return 0;
  }
}

// `*counters`: the object of the rule's IBV_FLOW_SPEC_ACTION_COUNT, if it has one; `*action`:
// the flow action of its IBV_FLOW_SPEC_ACTION_HANDLE.
Status Convert(const ibv_flow_spec* spec, FlowRule* rule, ibv_counters** counters, ibv_flow_action** action) {
  const uint32_t type = spec->hdr.type;
  HeaderMatch& m = (type & IBV_FLOW_SPEC_INNER) ? rule->inner : rule->outer;
  const size_t want = SpecSize(type);
  switch (type & ~IBV_FLOW_SPEC_INNER) {
    case IBV_FLOW_SPEC_GRE: case IBV_FLOW_SPEC_MPLS:
      return NotSupported("flow spec type " + std::to_string(type) + " (GRE, MPLS) is not offered");
    default: break;
  }
  if (want == 0) return Invalid("flow spec type " + std::to_string(type) + " is not a spec type (ibv_create_flow(3))");
  if (spec->hdr.size != want)
    return Invalid("flow spec type " + std::to_string(type) + " has size " + std::to_string(spec->hdr.size) +
                   ", its struct is " + std::to_string(want) + " bytes");
  const bool inner = (type & IBV_FLOW_SPEC_INNER) != 0;
  if (inner && type >= IBV_FLOW_SPEC_ACTION_TAG) return Invalid("IBV_FLOW_SPEC_INNER marks header specs, not actions");
  switch (type & ~IBV_FLOW_SPEC_INNER) {
    case IBV_FLOW_SPEC_ETH:
      m.eth.present = true;
      Eth(spec->eth.val, &m.eth.val), Eth(spec->eth.mask, &m.eth.mask);
      break;
    case IBV_FLOW_SPEC_IPV4: {
      ibv_flow_ipv4_ext_filter v{}, k{};
      v.src_ip = spec->ipv4.val.src_ip, v.dst_ip = spec->ipv4.val.dst_ip;
      k.src_ip = spec->ipv4.mask.src_ip, k.dst_ip = spec->ipv4.mask.dst_ip;
      m.ipv4.present = true;
      Ipv4(v, &m.ipv4.val), Ipv4(k, &m.ipv4.mask);
      break;
    }
    case IBV_FLOW_SPEC_IPV4_EXT:
      m.ipv4.present = true;
      Ipv4(spec->ipv4_ext.val, &m.ipv4.val), Ipv4(spec->ipv4_ext.mask, &m.ipv4.mask);
      break;
    case IBV_FLOW_SPEC_IPV6:
      m.ipv6.present = true;
      Ipv6(spec->ipv6.val, &m.ipv6.val), Ipv6(spec->ipv6.mask, &m.ipv6.mask);
      break;
    case IBV_FLOW_SPEC_TCP:
    case IBV_FLOW_SPEC_UDP: {
      auto& l4 = (type & ~IBV_FLOW_SPEC_INNER) == IBV_FLOW_SPEC_TCP ? m.tcp : m.udp;
      l4.present = true;
      Ports(spec->tcp_udp.val, &l4.val), Ports(spec->tcp_udp.mask, &l4.mask);
      break;
    }
    case IBV_FLOW_SPEC_VXLAN_TUNNEL:
      rule->vxlan_vni.present = true;
      rule->vxlan_vni.val = ntohl(spec->tunnel.val.tunnel_id) & 0xffffff;
      rule->vxlan_vni.mask = ntohl(spec->tunnel.mask.tunnel_id) & 0xffffff;
      break;
    case IBV_FLOW_SPEC_ACTION_TAG:
      // mlx5 carries a 24-bit flow tag (MLX5_FLOW_TAG_MASK).
      if (spec->flow_tag.tag_id > 0xffffff) return Invalid("tag_id " + std::to_string(spec->flow_tag.tag_id) + " exceeds 24 bits");
      rule->has_tag = true;
      rule->tag = spec->flow_tag.tag_id;
      break;
    case IBV_FLOW_SPEC_ACTION_DROP:
      rule->drop = true;
      break;
    case IBV_FLOW_SPEC_ESP:
      // mlx5 matches the SPI only (outer_esp_spi): a sequence number mask is EOPNOTSUPP there.
      if (spec->esp.mask.seq != 0) return NotSupported("IBV_FLOW_SPEC_ESP matches the SPI only: mask.seq must be 0 (as mlx5)");
      rule->esp_spi.present = true;
      rule->esp_spi.val = ntohl(spec->esp.val.spi);
      rule->esp_spi.mask = ntohl(spec->esp.mask.spi);
      break;
    case IBV_FLOW_SPEC_ACTION_HANDLE:
      // mlx5's parse_flow_flow_action: one crypto action per rule.
      if (*action != nullptr) return Invalid("a rule has at most one ESP action (IBV_FLOW_SPEC_ACTION_HANDLE), as mlx5");
      if (spec->handle.action == nullptr) return Invalid("IBV_FLOW_SPEC_ACTION_HANDLE with action NULL");
      *action = const_cast<ibv_flow_action*>(spec->handle.action);
      break;
    case IBV_FLOW_SPEC_ACTION_COUNT:
      // mlx5's get_flow_mcounters: one counters object per flow.
      if (*counters != nullptr) return Invalid("a rule has at most one IBV_FLOW_SPEC_ACTION_COUNT (as mlx5)");
      if (spec->flow_count.counters == nullptr) return Invalid("IBV_FLOW_SPEC_ACTION_COUNT with counters NULL");
      *counters = spec->flow_count.counters;
      break;
  }
  return Status::Ok();
}

Status ToRule(const ibv_flow_attr& attr, FlowRule* rule, ibv_counters** counters, ibv_flow_action** action) {
  if (attr.comp_mask != 0) return Invalid("comp_mask must be 0");
  if (attr.type > IBV_FLOW_ATTR_SNIFFER) return Invalid("type " + std::to_string(attr.type) + " is not a rule type");
  rule->type = static_cast<transport::raw::FlowType>(attr.type);
  rule->priority = attr.priority;
  const auto* at = reinterpret_cast<const uint8_t*>(&attr + 1);
  for (uint8_t i = 0; i < attr.num_of_specs; ++i) {
    // The specs follow the 20-byte attr back to back, so they are only 4-byte aligned: each is
    // read through an aligned copy (ibv_flow_spec has 8-byte members).
    decltype(ibv_flow_spec::hdr) hdr;
    memcpy(&hdr, at, sizeof hdr);
    if (hdr.size == 0) return Invalid("flow spec " + std::to_string(i) + " has size 0");
    ibv_flow_spec spec;
    memset(&spec, 0, sizeof spec);
    memcpy(&spec, at, std::min<size_t>(hdr.size, sizeof spec));
    SV_RETURN_IF_ERROR(Convert(&spec, rule, counters, action));
    at += hdr.size;
  }
  return Status::Ok();
}

}  // namespace

ibv_flow* CreateFlow(ibv_qp* qp, ibv_flow_attr* attr) {
  FlowRule rule;
  ibv_counters* counters = nullptr;
  ibv_flow_action* action = nullptr;
  if (Status s = ToRule(*attr, &rule, &counters, &action); !s.ok())
    return ReturnNull<ibv_flow>("ibv_create_flow", Name(qp), s);
  if (counters != nullptr && counters->context != qp->context)
    return ReturnNull<ibv_flow>("ibv_create_flow", Name(qp), Invalid("the counters belong to another context"));
  // The kernel finds an action by its handle among the objects of the QP's own context.
  if (action != nullptr && action->context != qp->context)
    return ReturnNull<ibv_flow>("ibv_create_flow", Name(qp), Invalid("the flow action belongs to another context"));
  auto core = core::Flow::Create(*ToSv(qp)->core, rule, attr->port, attr->flags, CoreOf(counters), CoreOf(action));
  if (!core.ok()) return ReturnNull<ibv_flow>("ibv_create_flow", Name(qp), core.status());
  auto* f = new (std::nothrow) SvFlow{};
  if (f == nullptr) return ReturnNull<ibv_flow>("ibv_create_flow", Name(qp), NoMemory("out of memory"));
  f->core = std::move(core.value());
  f->flow.context = qp->context;
  f->flow.handle = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(f));
  return &f->flow;
}

int DestroyFlow(ibv_flow* flow) {
  delete reinterpret_cast<SvFlow*>(flow);
  return 0;
}

}  // namespace softverbs::abi
