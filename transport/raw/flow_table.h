// Flow steering (ibv_create_flow(3)): which of this process's raw QPs a frame goes to.
//
// - SNIFFER rules see every frame of the port, received and sent.
// - NORMAL rules are tried from the lowest priority value up. At the first priority where some
//   match, each matching QP gets one copy (rules of equal priority replicate, as mlx5's
//   destinations of one flow entry do); a matching DROP rule at that priority drops the frame
//   instead. A matching rule with IBV_FLOW_ATTR_FLAGS_DONT_TRAP lets the frame go on to the
//   next priorities.
// - A frame no NORMAL rule matched goes to the MC_DEFAULT rules if it is multicast and there are
//   any, otherwise to the ALL_DEFAULT rules.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fabric/raw/frame.h"
#include "transport/raw/flow_rule.h"

namespace softverbs::transport::raw {

// What the matched rule adds to the completion.
struct FlowMark {
  bool has_tag = false;
  uint32_t tag = 0;  // IBV_FLOW_SPEC_ACTION_TAG, read by ibv_wc_read_flow_tag
  // An ESP DECRYPT action: the port checks and decrypts the frame before the QP gets it.
  std::shared_ptr<const EspSa> decrypt;
};

// A QP receiving steered frames (core/raw_qp.h).
class RawSink {
 public:
  virtual ~RawSink() = default;
  virtual void OnFrame(std::span<const uint8_t> frame, const fabric::raw::FrameView& view, const FlowMark& mark) = 0;
  // Its transport domain (mlx5: one per device context). A frame that a QP of the same domain
  // sent and the port looped back reaches this QP only if it allows self-loopback of that kind
  // (MLX5DV_QP_CREATE_TIR_ALLOW_SELF_LOOPBACK_UC / _MC, mlx5dv_create_qp(3)).
  virtual const void* domain() const { return this; }
  virtual bool AllowsSelfLoopback(bool /*multicast*/) const { return false; }
};

struct Delivery {
  RawSink* sink = nullptr;
  FlowMark mark;
};

// Where a frame came from, which decides the rules it meets.
enum class FrameSource {
  kReceived,  // from the interface: every rule
  kLoopback,  // sent by a QP of this host to the port itself: every rule
  kSentAway,  // sent out of the port: sniffers only
};

class FlowTable {
 public:
  uint64_t Add(const FlowRule& rule, RawSink* sink);
  // False if `id` names no rule.
  bool Remove(uint64_t id);
  // The QPs the frame goes to (each once). `sender`: the QP of this process that sent it (or
  // null); sniffers never get their own QP's frames, and a looped-back frame skips the QPs of
  // the sender's domain that do not allow self-loopback (RawSink above).
  void Steer(std::span<const uint8_t> frame, const fabric::raw::FrameView& view, FrameSource source,
             const RawSink* sender, std::vector<Delivery>* out) const;
  bool empty() const { return rules_.empty(); }

 private:
  struct Entry {
    uint64_t id;
    FlowRule rule;
    RawSink* sink;
  };
  std::vector<Entry> rules_;  // by priority, then by age
  uint64_t next_id_ = 1;
};

}  // namespace softverbs::transport::raw
