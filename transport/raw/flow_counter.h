// A flow counter (IBV_FLOW_SPEC_ACTION_COUNT, ibv_create_counters(3)): the packets and bytes one
// rule matched, as a NIC's flow counter object attached to a flow entry counts them. The rule's
// steering (flow_table.cc) adds to it; ibv_read_counters reads it (core/counters.h).
#pragma once

#include <atomic>
#include <cstdint>

namespace softverbs::transport::raw {

struct FlowCounter {
  std::atomic<uint64_t> packets{0};
  std::atomic<uint64_t> bytes{0};  // the frame as on the wire, without its FCS

  void Count(uint64_t frame_bytes) {
    packets.fetch_add(1, std::memory_order_relaxed);
    bytes.fetch_add(frame_bytes, std::memory_order_relaxed);
  }
};

}  // namespace softverbs::transport::raw
