// A flow steering rule in the transport's terms (ibv_create_flow(3)): the headers it matches,
// each with a value and a mask, and its actions. abi/ converts struct ibv_flow_attr into this;
// core/flow.* checks it; flow_table.* applies it to frames.
#pragma once

#include <cstdint>
#include <memory>

#include "fabric/raw/frame.h"
#include "transport/raw/flow_counter.h"

namespace softverbs::transport::raw {

class EspSa;

// enum ibv_flow_attr_type
enum class FlowType : uint32_t { kNormal = 0, kAllDefault = 1, kMcDefault = 2, kSniffer = 3 };

// Header fields a rule can match. Multi-byte fields in host order, addresses as on the wire.
struct EthFields {
  uint8_t dst_mac[6] = {}, src_mac[6] = {};
  uint16_t ether_type = 0, vlan_tag = 0;
};
struct Ipv4Fields {
  uint32_t src_be = 0, dst_be = 0;
  uint8_t proto = 0, tos = 0, ttl = 0, flags = 0;
};
struct Ipv6Fields {
  uint8_t src[16] = {}, dst[16] = {};
  uint32_t flow_label = 0;
  uint8_t next_hdr = 0, traffic_class = 0, hop_limit = 0;
};
struct L4Fields {
  uint16_t src_port = 0, dst_port = 0;
};

template <typename Fields>
struct Masked {
  bool present = false;
  Fields val, mask;
};

// The specs of one header stack (the outer one, or the inner one of a tunnel).
struct HeaderMatch {
  Masked<EthFields> eth;
  Masked<Ipv4Fields> ipv4;
  Masked<Ipv6Fields> ipv6;
  Masked<L4Fields> tcp, udp;
};

struct FlowRule {
  FlowType type = FlowType::kNormal;
  uint16_t priority = 0;
  bool dont_trap = false;  // IBV_FLOW_ATTR_FLAGS_DONT_TRAP: lower priorities are matched too
  HeaderMatch outer;
  Masked<uint32_t> vxlan_vni;  // IBV_FLOW_SPEC_VXLAN_TUNNEL (tunnel_id, 24 bits)
  HeaderMatch inner;           // specs with IBV_FLOW_SPEC_INNER
  Masked<uint32_t> esp_spi;    // IBV_FLOW_SPEC_ESP: an ESP packet, its SPI (host order)
  bool egress = false;         // IBV_FLOW_ATTR_FLAGS_EGRESS: frames sent, not received
  // IBV_FLOW_SPEC_ACTION_HANDLE of an ESP action: encrypt (egress) or decrypt (ingress).
  std::shared_ptr<const EspSa> esp;
  bool drop = false;           // IBV_FLOW_SPEC_ACTION_DROP
  bool has_tag = false;        // IBV_FLOW_SPEC_ACTION_TAG
  uint32_t tag = 0;
  // IBV_FLOW_SPEC_ACTION_COUNT: every frame this rule matches is counted, whether it is
  // delivered, dropped (a DROP rule) or passed on (DONT_TRAP).
  std::shared_ptr<FlowCounter> counter;
};

// The rule's header specs match `frame` (already parsed into `view`). Type and actions are not
// looked at.
bool Matches(const FlowRule& rule, std::span<const uint8_t> frame, const fabric::raw::FrameView& view);

}  // namespace softverbs::transport::raw
