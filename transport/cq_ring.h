// The completion ring of a CQ. It lives in the CQ owner's shared arena so that a sender in
// another process can deliver a receive completion into it (DESIGN.md section 5: the initiator
// is the NIC). Producers (any process) append under the ring's robust lock; the owner polls
// without it: each entry is published by its stamp, written with release order after the entry,
// and `head` hands slots back, so an empty poll reads one line the producer writes only to
// publish (the spinning consumer of a latency test never contends with the producer it waits
// for, and no separate `tail` line crosses).
//
// A small SEND may travel inside its completion entry ("landing"): the sender copies the bytes
// into the entry instead of into the receiver's private memory (which would cost it a system
// call), and the owner's poll scatters them into the receive buffers before it returns the
// completion, so the data is in place when the application sees it (ibv_poll_cq(3)).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

// CqEntry::flags: the entry's `full` completion is the one to return (a field the first line
// has no room for is set); the landing's piece count above it.
inline constexpr uint8_t kCqEntryFull = 1;
inline constexpr uint8_t kCqEntryPieceShift = 1;

// One completion. The poller finds a written entry by its stamp (the low 32 bits of its
// position + 1, released after the entry; the mlx5 CQE ownership bit's role), so the producers'
// `tail` never crosses to the owner's core. The first cache line holds what a completion without
// extras returns, the landing's first piece and its first 8 bytes: an 8-byte SEND's completion
// moves one line between the processes (issue 16 item 3). A completion with more (timestamps, a
// vendor error, raw QP or UD fields) is also stored whole in `full`, on the next lines.
struct alignas(64) CqEntry {
  uint64_t wr_id;
  uint32_t status;
  uint32_t opcode;
  uint32_t byte_len;
  uint32_t imm_data;
  uint32_t qp_num;
  uint32_t src_qp;
  uint32_t wc_flags;
  uint8_t landing_length;  // 0: nothing to scatter
  uint8_t flags;           // kCqEntryFull | landing pieces << kCqEntryPieceShift
  uint8_t piece0_length;   // the landing's first piece (at most kLandingBytes)
  uint8_t spare;
  uint32_t piece0_lkey;
  uint32_t seq;  // low 32 bits of position + 1 once written (std::atomic_ref: release / acquire)
  uint64_t piece0_addr;
  uint8_t landing[kLandingBytes];  // its first 8 bytes end the first line
  Completion full;
  LandingPiece piece1;
  TmInfo tm;  // in the entry's last line: only tag-matched receives write or read it
};
static_assert(std::is_trivially_copyable_v<CqEntry>);
static_assert(sizeof(CqEntry) == 256 && offsetof(CqEntry, landing) + 8 == 64 && offsetof(CqEntry, seq) < 64,
              "an 8-byte landing, its piece and the stamp share the entry's first line");

inline LandingPiece CqEntryPiece(const CqEntry& e, uint32_t i) {
  return i == 0 ? LandingPiece{e.piece0_addr, e.piece0_length, e.piece0_lkey} : e.piece1;
}
inline void CqEntrySetPiece(CqEntry& e, uint32_t i, const LandingPiece& p) {
  if (i != 0) {
    e.piece1 = p;
    return;
  }
  e.piece0_addr = p.addr;
  e.piece0_length = static_cast<uint8_t>(p.length);  // a landed piece is at most kLandingBytes
  e.piece0_lkey = p.lkey;
}
inline uint32_t CqEntryPieces(const CqEntry& e) { return e.flags >> kCqEntryPieceShift; }

// True when the first line carries all of `c`: vendor_err and every field after wc_flags are
// zero (`solicited` aside: it decides the arming at the producer, the poller never reads it).
// Read as whole words (a few instructions instead of a dozen compares and branches).
inline bool CqEntryFitsFirstLine(const Completion& c) {
  static_assert(offsetof(Completion, pkey_index) == 40 && offsetof(Completion, solicited) == 46 &&
                    offsetof(Completion, has_flow_tag) == 48 && offsetof(Completion, cvlan) == 50 &&
                    offsetof(Completion, timestamp_ns) == 56 && sizeof(Completion) == 72,
                "the words CqEntryFitsFirstLine reads");
  uint64_t w[4];
  memcpy(w, reinterpret_cast<const uint8_t*>(&c) + 40, sizeof(w));
  const uint64_t solicited = 0xffull << 48, padding = 0xffull << 8;  // byte 46; byte 49
  return ((w[0] & ~solicited) | (w[1] & ~padding) | w[2] | w[3] | c.vendor_err) == 0;
}

// The first line's completion fields are Completion's, in its order, in two runs: wr_id,
// status, opcode; then byte_len .. wc_flags (vendor_err between them is left out).
static_assert(offsetof(Completion, status) == 8 && offsetof(Completion, opcode) == 12 &&
              offsetof(Completion, byte_len) == 20 && offsetof(Completion, wc_flags) == 36);
static_assert(offsetof(CqEntry, status) == 8 && offsetof(CqEntry, opcode) == 12 && offsetof(CqEntry, byte_len) == 16 &&
              offsetof(CqEntry, wc_flags) == 32);

// Writes `c` into `e` (not its stamp), no landing.
inline void CqEntryWrite(CqEntry& e, const Completion& c) {
  memcpy(&e.wr_id, &c.wr_id, 16);
  memcpy(&e.byte_len, &c.byte_len, 20);
  e.landing_length = 0;
  e.flags = 0;
  if (!CqEntryFitsFirstLine(c)) [[unlikely]] {
    e.full = c;
    e.flags = kCqEntryFull;
  }
}

inline Completion CqEntryRead(const CqEntry& e) {
  if (e.flags & kCqEntryFull) return e.full;
  Completion c;
  memcpy(&c.wr_id, &e.wr_id, 16);
  memcpy(&c.byte_len, &e.byte_len, 20);
  return c;
}

inline uint32_t CqStamp(uint64_t position) { return static_cast<uint32_t>(position + 1); }

inline void CqEntryPublish(CqEntry& e, uint64_t position) {
  std::atomic_ref<uint32_t>(e.seq).store(CqStamp(position), std::memory_order_release);
}

// The entry at `position` if a producer has written it, else nullptr (the owner, polling).
inline const CqEntry* CqEntryAt(CqEntry* entries, uint32_t capacity, uint64_t position) {
  if (capacity == 0) return nullptr;
  CqEntry& e = entries[position % capacity];
  return std::atomic_ref<uint32_t>(e.seq).load(std::memory_order_acquire) == CqStamp(position) ? &e : nullptr;
}

// Stamps the entries of positions [from, to) as not written (creation, and the slots a removal
// or a resize frees): the stamp of the slot's previous lap, which position p never matches
// (capacity is below 2^32). A slot's stamp is otherwise always its previous lap's or its own.
inline void CqEntriesMarkEmpty(CqEntry* entries, uint32_t capacity, uint64_t from, uint64_t to) {
  for (uint64_t p = from; p < to; ++p)
    std::atomic_ref<uint32_t>(entries[p % capacity].seq).store(CqStamp(p - capacity), std::memory_order_relaxed);
}

// Restamps the entries of positions [from, to) as written (their contents were moved there by
// the owner, the ring locked, its poll excluded).
inline void CqEntriesMarkWritten(CqEntry* entries, uint32_t capacity, uint64_t from, uint64_t to) {
  for (uint64_t p = from; p < to; ++p)
    std::atomic_ref<uint32_t>(entries[p % capacity].seq).store(CqStamp(p), std::memory_order_release);
}

// Copies an entry into another slot of a live ring, all but its stamp (which the owner's
// unlocked look at the next entry may be reading): CqEntriesMarkWritten stamps it after.
inline void CqEntryMoveUnstamped(CqEntry& to, const CqEntry& from) {
  constexpr size_t kStamp = offsetof(CqEntry, seq), kAfter = kStamp + sizeof(CqEntry::seq);
  memcpy(static_cast<void*>(&to), &from, kStamp);
  memcpy(reinterpret_cast<uint8_t*>(&to) + kAfter, reinterpret_cast<const uint8_t*>(&from) + kAfter,
         sizeof(CqEntry) - kAfter);
}

// Three cache lines with one writer pattern each (issue 16 item 3: a small message costs the
// lines that cross cores): what producers write at every completion, next to the lock they
// take, `tail` included (the owner finds entries by their stamps and reads `tail` only under the
// lock); what nobody writes while messages flow (read by both sides); and the owner's `head`
// with what its poll reads every time.
struct CqRing {
  fabric::RobustMutex lock;  // producers, and the owner's control operations
  uint64_t head_seen;        // producers' last read of `head` (under `lock`): re-read when full
  std::atomic<uint64_t> tail;  // next entry to fill (producers, under `lock`)
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
  // The owner's line: `head`, and whether a QP completing here has an error to apply (ERR and
  // its flushes: applied at the owner's next poll, so a consumer that only polls sees the
  // flushes) or the ring overran (IBV_EVENT_CQ_ERR) -- written by producers only then.
  alignas(64) std::atomic<uint64_t> head;  // next entry to poll (the owner)
  std::atomic<uint32_t> attention;
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
  uint64_t tail = ring.tail.load(std::memory_order_relaxed);
  CqEntry* e;
  for (;;) {
    if (tail - ring.head_seen >= ring.capacity) {
      ring.head_seen = ring.head.load(std::memory_order_acquire);
      if (ring.capacity == 0 || tail - ring.head_seen >= ring.capacity) {
        ring.overrun = 1;  // IBA 11.4.2.1: the CQ is in error; its owner reports IBV_EVENT_CQ_ERR
        ring.attention.store(1, std::memory_order_release);
        return out;
      }
    }
    e = &entries[tail % ring.capacity];
    if (std::atomic_ref<uint32_t>(e->seq).load(std::memory_order_relaxed) != CqStamp(tail)) [[likely]]
      break;
    // A producer died between publishing this entry and advancing `tail` (the robust lock passed
    // to us): the owner may have polled it already, so it stays, and `tail` moves past it.
    ring.tail.store(++tail, std::memory_order_relaxed);
  }
  if (ring.stamp == kCqStampNone) {
    CqEntryWrite(*e, c);
  } else {
    Completion stamped = c;
    if (ring.stamp & kCqStampDevice) stamped.timestamp_ns = DeviceClockNow();
    if (ring.stamp & kCqStampWallclock) stamped.wallclock_ns = WallclockNow();
    CqEntryWrite(*e, stamped);
  }
  fill(*e);
  CqEntryPublish(*e, tail);
  ring.tail.store(tail + 1, std::memory_order_relaxed);
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
