// The completion ring of a CQ. It lives in the CQ owner's shared arena so that a sender in
// another process can deliver a receive completion into it (DESIGN.md section 5: the initiator
// is the NIC). Producers (any process) append under the ring's robust lock; the owner polls
// without it: `tail` is published with release order after the entry is written, and `head`
// hands slots back, so an empty poll is two loads and no lock (the spinning consumer of a
// latency test never contends with the producer it waits for).
//
// A small SEND may travel inside its completion entry ("landing"): the sender copies the bytes
// into the entry instead of into the receiver's private memory (which would cost it a system
// call), and the owner's poll scatters them into the receive buffers before it returns the
// completion, so the data is in place when the application sees it (ibv_poll_cq(3)).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/clock.h"
#include "transport/completion.h"
#include "fabric/host/robust_mutex.h"
#include "fabric/host/shared_arena.h"

namespace softverbs::transport {

enum CqArm : uint32_t { kCqArmNone = 0, kCqArmSolicited = 1, kCqArmNext = 2 };

// Which clocks producers read into a completion (ibv_create_cq_ex(3) wc_flags).
enum CqStamp : uint32_t { kCqStampNone = 0, kCqStampDevice = 1, kCqStampWallclock = 2 };

// Bytes a landing can carry: a UD GRH (40) plus a small message, in at most two buffers.
inline constexpr uint32_t kLandingBytes = 88;
inline constexpr uint32_t kLandingPieces = 2;

// Where the owner's poll scatters landed bytes: an address of the owner, through its key `lkey`
// (checked again at poll time: the MR may be gone by then).
struct LandingPiece {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

struct alignas(64) CqEntry {  // a small message touches the first two cache lines only
  Completion c;
  uint32_t landing_length;  // 0: nothing to scatter
  uint32_t landing_pieces;
  LandingPiece piece[kLandingPieces];
  uint8_t landing[kLandingBytes];
  TmInfo tm;  // in the entry's last line: only tag-matched receives write or read it
};
static_assert(std::is_trivially_copyable_v<CqEntry>);
static_assert(sizeof(CqEntry) == 256 && offsetof(CqEntry, landing) < 128, "TM info costs no line of a small message");

// Three cache lines with one writer pattern each (issue 16 item 3: a small message costs the
// lines that cross cores): what producers write at every completion, next to the lock they
// take; what nobody writes while messages flow (read by both sides); the producers' `tail`;
// and the owner's `head` on a line of its own.
struct CqRing {
  fabric::RobustMutex lock;  // producers, and the owner's control operations
  uint64_t head_seen;        // producers' last read of `head` (under `lock`): re-read when full
  // An event was raised and the channel has not collected it yet (CompChannel::Wait).
  std::atomic<uint32_t> fired;
  uint32_t overrun;  // a completion was lost because the ring was full (also raises `attention`)
  uint32_t arm;      // CqArm: the owner arms, the producer that fires disarms
  // Read-mostly: set at creation and resize.
  alignas(64) uint32_t capacity;  // entries the array holds
  int32_t channel_fd;             // the owner's channel eventfd, or -1
  uint32_t stamp;                 // CqStamp bits
  uint64_t channel_tag;           // names this incarnation of channel_fd (fabric::LocalProcess::NewFdTag)
  fabric::SharedRef entries;
  // ibv_modify_cq(3) moderation (the owner sets it; 0 and 0: none): the event of an armed CQ
  // waits for `mod_count` completions or `mod_period_us` after the first of them. A producer
  // whose completion starts such a wait signals the owner's timer (`timer_fd`), which fires the
  // event when the period ends (core/cq_moderation.h). Written by producers only when moderated.
  uint16_t mod_count;
  uint16_t mod_period_us;
  uint32_t mod_pending;   // completions that would have fired the arming since it was last fired
  uint64_t mod_first_ns;  // DeviceClockNow() of the first of them
  int32_t timer_fd;       // the owner's moderation timer eventfd, or -1
  uint64_t timer_tag;
  // What the owner's poll reads, on one line: the producers' tail, and whether a QP completing
  // here has an error to apply (ERR and its flushes: applied at the owner's next poll, so a
  // consumer that only polls sees the flushes) or the ring overran (IBV_EVENT_CQ_ERR).
  alignas(64) std::atomic<uint64_t> tail;  // next entry to fill (producers, under `lock`)
  std::atomic<uint32_t> attention;
  alignas(64) std::atomic<uint64_t> head;  // next entry to poll (the owner)
};
static_assert(offsetof(CqRing, capacity) == 64, "the producers' line holds the lock and their fields");

struct PushOutcome {
  bool stored = false;  // false: the ring was full (overrun)
  int notify_fd = -1;   // the owner's channel eventfd to signal, or -1
  uint64_t notify_tag = 0;
};

// ibv_modify_cq(3) / mlx5 CQ moderation, for a completion that would fire the arming (ring
// locked): true while the event must wait -- fewer than mod_count completions (0: no count
// limit) since the first, and less than mod_period_us since it (0: no time limit). With neither
// limit set the event fires at once. The completion that starts a timed wait wakes the owner's
// timer through `out` (the channel is signalled later, by the timer or by the count).
inline bool ModerationHolds(CqRing& ring, PushOutcome* out) {
  if (ring.mod_count <= 1 && ring.mod_period_us == 0) return false;
  const uint64_t now = DeviceClockNow();
  if (ring.mod_pending++ == 0) {
    ring.mod_first_ns = now;
    if (ring.mod_period_us != 0 && ring.timer_fd >= 0) {
      out->notify_fd = ring.timer_fd;
      out->notify_tag = ring.timer_tag;
    }
  }
  const bool count_met = ring.mod_count != 0 && ring.mod_pending >= ring.mod_count;
  const bool period_met = ring.mod_period_us != 0 && now - ring.mod_first_ns >= ring.mod_period_us * 1000ull;
  return !(count_met || period_met);
}

// Adds `c` with `landing` bytes (ring locked by the caller; `entries` is the resolved array).
// `fill` may write the entry's landing fields; it runs only if there is room.
template <typename Fill>
PushOutcome CqRingPushLocked(CqRing& ring, CqEntry* entries, const Completion& c, Fill&& fill) {
  PushOutcome out;
  const uint64_t tail = ring.tail.load(std::memory_order_relaxed);
  if (tail - ring.head_seen >= ring.capacity) {
    ring.head_seen = ring.head.load(std::memory_order_acquire);
    if (ring.capacity == 0 || tail - ring.head_seen >= ring.capacity) {
      ring.overrun = 1;  // IBA 11.4.2.1: the CQ is in error; its owner reports IBV_EVENT_CQ_ERR
      ring.attention.store(1, std::memory_order_release);
      return out;
    }
  }
  CqEntry& e = entries[tail % ring.capacity];
  e.c = c;
  if (ring.stamp & kCqStampDevice) e.c.timestamp_ns = DeviceClockNow();
  if (ring.stamp & kCqStampWallclock) e.c.wallclock_ns = WallclockNow();
  e.landing_length = 0;
  e.landing_pieces = 0;
  fill(e);
  ring.tail.store(tail + 1, std::memory_order_release);
  out.stored = true;
  // ibv_req_notify_cq(3): solicited-only arming fires for solicited completions and for every
  // completion with an error status; an arming fires once.
  if (ring.arm == kCqArmNext || (ring.arm == kCqArmSolicited && (c.solicited || c.status != 0))) {
    if (ModerationHolds(ring, &out)) return out;
    ring.arm = kCqArmNone;
    ring.mod_pending = 0;
    if (ring.channel_fd >= 0) {
      ring.fired.store(1, std::memory_order_release);
      out.notify_fd = ring.channel_fd;
      out.notify_tag = ring.channel_tag;
    }
  }
  return out;
}

// Adds `c` from any process: `resolve(SharedRef)` maps the entry array into the caller's space.
template <typename Resolve, typename Fill>
PushOutcome CqRingPush(CqRing& ring, const Completion& c, Resolve&& resolve, Fill&& fill) {
  fabric::RobustLock lock(ring.lock);
  auto* entries = static_cast<CqEntry*>(resolve(ring.entries));
  if (entries == nullptr) return {};
  return CqRingPushLocked(ring, entries, c, fill);
}

template <typename Resolve>
PushOutcome CqRingPush(CqRing& ring, const Completion& c, Resolve&& resolve) {
  return CqRingPush(ring, c, resolve, [](CqEntry&) {});
}

}  // namespace softverbs::transport
