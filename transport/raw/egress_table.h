// Egress flow rules (IBV_FLOW_ATTR_FLAGS_EGRESS): what a frame a raw QP of this process sends
// meets before it leaves the port, as mlx5's NIC transmit flow table. Rules are tried from the
// lowest priority value up; the first that matches decides (IBV_FLOW_ATTR_FLAGS_DONT_TRAP goes on
// to the next): an ESP ENCRYPT action encrypts the frame (esp.h), DROP drops it, a rule with
// neither lets it leave as it is (mlx5's "allow"). A frame no rule matches leaves as it is.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "transport/raw/flow_rule.h"

namespace softverbs::transport::raw {

class EgressTable {
 public:
  // Ids have the top bit set, so that a port can tell them from its receive rules' ids.
  static constexpr uint64_t kIdBit = uint64_t(1) << 63;
  uint64_t Add(const FlowRule& rule);
  bool Remove(uint64_t id);
  bool empty() const { return rules_.empty(); }
  // The frames as they leave (`out`): encrypted where an ENCRYPT rule matched; without those a
  // DROP rule matched, or an ENCRYPT rule could not encrypt (not an ESP packet with room for
  // its IV, trailer and ICV: a plaintext frame meant to be encrypted never leaves).
  void Apply(std::span<const std::vector<uint8_t>> frames, std::vector<std::vector<uint8_t>>* out) const;

 private:
  struct Entry {
    uint64_t id;
    FlowRule rule;
  };
  std::vector<Entry> rules_;  // by priority, then by age
  uint64_t next_id_ = 1;
};

}  // namespace softverbs::transport::raw
