// The completion ring of a CQ. It lives in the CQ owner's shared arena so that a sender in
// another process can deliver a receive completion into it (DESIGN.md section 5: the initiator
// is the NIC). Every operation runs under the ring's robust lock; the entry array is located by a
// SharedRef resolved by the caller in its own address space.
#pragma once

#include <atomic>
#include <cstdint>
#include <type_traits>

#include "transport/completion.h"
#include "fabric/host/robust_mutex.h"
#include "fabric/host/shared_arena.h"

namespace softverbs::transport {

enum CqArm : uint32_t { kCqArmNone = 0, kCqArmSolicited = 1, kCqArmNext = 2 };

struct CqRing {
  fabric::RobustMutex lock;
  uint32_t capacity;  // entries the array holds
  uint32_t count;     // entries present
  uint32_t head;      // index of the oldest
  uint32_t arm;       // CqArm
  // An event was raised and the channel has not collected it yet (CompChannel::Wait).
  std::atomic<uint32_t> fired;
  int32_t channel_fd;    // the owner's channel eventfd, or -1
  uint32_t overrun;      // a completion was lost because the ring was full
  uint64_t channel_tag;  // names this incarnation of channel_fd (fabric::LocalProcess::NewFdTag)
  // A QP completing here has an error to apply (ERR and its flushes): the owner's next poll
  // applies it, so a consumer that only polls sees the flushes.
  std::atomic<uint32_t> attention;
  fabric::SharedRef entries;
};
static_assert(std::is_trivially_copyable_v<Completion>);

struct PushOutcome {
  bool stored = false;  // false: the ring was full (overrun)
  int notify_fd = -1;   // the owner's channel eventfd to signal, or -1
  uint64_t notify_tag = 0;
};

// Adds `c` (ring locked by the caller; `entries` is the resolved entry array).
inline PushOutcome CqRingPushLocked(CqRing& ring, Completion* entries, const Completion& c) {
  PushOutcome out;
  if (ring.count >= ring.capacity) {
    ring.overrun = 1;
    return out;
  }
  entries[(ring.head + ring.count) % ring.capacity] = c;
  ++ring.count;
  out.stored = true;
  // ibv_req_notify_cq(3): solicited-only arming fires for solicited completions and for every
  // completion with an error status; an arming fires once.
  if (ring.arm == kCqArmNext || (ring.arm == kCqArmSolicited && (c.solicited || c.status != 0))) {
    ring.arm = kCqArmNone;
    if (ring.channel_fd >= 0) {
      ring.fired.store(1, std::memory_order_release);
      out.notify_fd = ring.channel_fd;
      out.notify_tag = ring.channel_tag;
    }
  }
  return out;
}

// Adds `c` from any process: `resolve(SharedRef)` maps the entry array into the caller's space.
template <typename Resolve>
PushOutcome CqRingPush(CqRing& ring, const Completion& c, Resolve&& resolve) {
  fabric::RobustLock lock(ring.lock);
  auto* entries = static_cast<Completion*>(resolve(ring.entries));
  if (entries == nullptr) return {};
  return CqRingPushLocked(ring, entries, c);
}

}  // namespace softverbs::transport
