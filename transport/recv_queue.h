// Receive queues (a QP's RQ or an SRQ) as rings in the owner's shared arena: the owner posts
// receive WQEs, a sender in any process takes one to place an incoming SEND (DESIGN.md section 5:
// the initiator is the NIC, so the sender does the responder's receive-side work).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "base/spin_lock.h"
#include "base/status.h"
#include "fabric/host/host_directory.h"
#include "fabric/host/robust_mutex.h"
#include "fabric/host/shared_arena.h"

namespace softverbs::transport {

struct RecvSge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

// One posted receive: wr_id and up to max_sge scatter entries. A taker finds it posted by its
// stamp, so the owner's `tail` never crosses to the taker's core: the WQE is the one line a
// post moves (the mlx5 CQE ownership bit's idea, on the receive queue).
struct RecvWqe {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t seq;    // low 32 bits of its position + 1 once posted (std::atomic_ref: release / acquire)
  RecvSge sge[1];  // max_sge entries follow in the ring
};

inline size_t RecvWqeSize(uint32_t max_sge) {
  return offsetof(RecvWqe, sge) + sizeof(RecvSge) * (max_sge == 0 ? 1 : max_sge);
}

// Posting is the owner's alone and takes no lock: it writes the WQE, then publishes its stamp
// (and advances its own `tail`). Takers (senders in any process) serialise on the robust lock,
// take the WQE at `head` if its stamp says it is posted, and hand slots back through `head`. One
// line holds what takers write at every take (the lock, `head`, the SRQ limit they check), one
// what nobody writes while messages flow, one the owner's `tail` (read by takers only for an
// armed SRQ limit): a post moves the WQE's line to the taker, a take moves nothing back unless
// the owner finds its ring full (issue 16 item 3).
//
// A 32-bit stamp is never stale-equal: a slot's last stamp is of its previous lap (max_wr
// positions before, and max_wr < 2^32) or, never written, 0 (position + 1 is never 0 for a
// slot's first lap).
struct RecvRing {
  fabric::RobustMutex lock;  // takers, and the owner's control operations
  std::atomic<uint64_t> head;  // next WQE to take (takers, under `lock`)
  uint32_t srq_limit;    // armed SRQ limit; 0 = not armed (ibv_modify_srq(3))
  std::atomic<uint32_t> limit_fired;  // the limit was crossed; the owner raises IBV_EVENT_SRQ_LIMIT_REACHED
  // Read-mostly: set at creation and resize.
  alignas(64) uint32_t max_wr;
  uint32_t max_sge;
  uint32_t wqe_size;
  int32_t async_fd;  // the owner context's async event fd, signalled when the limit fires
  uint64_t async_tag;
  fabric::SharedRef entries;
  fabric::SharedRef tm;  // a TM SRQ's tag table (transport/tag_matcher.h); none otherwise
  alignas(64) std::atomic<uint64_t> tail;  // next slot to fill (the owner)
};
static_assert(offsetof(RecvRing, max_wr) == 64, "the takers' line holds the lock, head and the limit");

// What a taker got: the WQE (copied out) or nothing.
struct TakenWqe {
  bool found = false;
  bool limit_crossed = false;  // this take armed-fired the SRQ limit
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  RecvSge sge[32];
};

// The slot of the WQE at `position` in a ring of `max_wr` slots. Consecutive positions sit two
// slots apart -- the first half of the positions of a lap in the even slots, the second half in
// the odd ones -- so that two of them never share a cache line (two 32-byte WQEs would): a
// program keeps its receive queue full, reposting after each completion (perftest), and then
// the slot the owner writes is the one after the slot the next take reads; in ring order the two
// would share a line, which the owner's write takes from the taker every other message. Each
// slot still serves one position per lap (the stamps' rule). Rings below 4 or of an odd size keep
// the plain order.
inline uint32_t RecvSlot(uint64_t position, uint32_t max_wr) {
  const uint32_t k = static_cast<uint32_t>(position % max_wr);
  if (max_wr < 4 || max_wr % 2 != 0) return k;
  const uint32_t half = max_wr / 2;
  return k < half ? 2 * k : 2 * (k - half) + 1;
}

// Takes the oldest WQE from `ring` in any process; `resolve` maps the entry array.
template <typename Resolve>
TakenWqe RecvRingTake(RecvRing& ring, Resolve&& resolve) {
  TakenWqe out;
  fabric::RobustLock lock(ring.lock);
  if (ring.max_wr == 0) return out;
  const uint64_t head = ring.head.load(std::memory_order_relaxed);
  auto* base = static_cast<uint8_t*>(resolve(ring.entries));
  if (base == nullptr) return out;
  auto* w = reinterpret_cast<RecvWqe*>(base + static_cast<size_t>(RecvSlot(head, ring.max_wr)) * ring.wqe_size);
  if (std::atomic_ref<uint32_t>(w->seq).load(std::memory_order_acquire) != static_cast<uint32_t>(head + 1)) return out;
  out.found = true;
  out.wr_id = w->wr_id;
  out.num_sge = w->num_sge <= 32 ? w->num_sge : 32;
  for (uint32_t i = 0; i < out.num_sge; ++i) out.sge[i] = w->sge[i];
  // The slot is the owner's again once head passes it (release: after the copy above).
  ring.head.store(head + 1, std::memory_order_release);
  // ibv_modify_srq(3): the event fires when the number of WQEs drops below the limit; then
  // the limit is disarmed.
  if (ring.srq_limit != 0 && ring.tail.load(std::memory_order_acquire) - (head + 1) < ring.srq_limit) {
    ring.srq_limit = 0;
    ring.limit_fired.store(1, std::memory_order_release);
    out.limit_crossed = true;
  }
  return out;
}

// The owner's side of a receive ring.
class RecvQueue {
 public:
  // `async_fd`: the owner's async event fd (signalled when an SRQ limit fires), or -1.
  static Result<std::unique_ptr<RecvQueue>> Create(fabric::LocalProcess& local, uint32_t max_wr, uint32_t max_sge,
                                                   int async_fd = -1, uint64_t async_tag = 0);
  ~RecvQueue();

  fabric::SharedRef ref() const { return ref_; }
  RecvRing& ring() const { return *ring_; }

  // ibv_post_recv: ENOMEM when the queue is full, EINVAL when num_sge exceeds max_sge.
  Status Post(uint64_t wr_id, const RecvSge* sge, uint32_t num_sge);
  // Takes the oldest WQE (the owner consuming locally, e.g. flushing).
  TakenWqe Take();
  // Drops every posted WQE (the QP moved to RESET).
  void Clear();
  // Resizes (SRQ max_wr); EINVAL if smaller than what is posted.
  Status Resize(uint32_t max_wr);
  void SetLimit(uint32_t limit);
  // True once per crossing of the armed limit (IBV_EVENT_SRQ_LIMIT_REACHED is due).
  bool TakeLimitFired() { return ring().limit_fired.exchange(0, std::memory_order_acq_rel) != 0; }
  uint32_t count() const;
  // A receive completion of this queue's WQE was polled (Cq::NotePolledReceive; only for a QP's
  // own queue, never an SRQ). Its WQE was taken before the completion was written, so the count
  // of such completions is a lower bound of the takers' `head` that Post reads without touching
  // their line -- as mlx5 frees an RQ's slots when poll_cq consumes their CQEs.
  void NotePolled() { polled_.store(polled_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  uint64_t polled() const { return polled_.load(std::memory_order_acquire); }  // (tests)

 private:
  RecvQueue(fabric::LocalProcess& local, fabric::SharedRef ref)
      : local_(local), ref_(ref), ring_(static_cast<RecvRing*>(local.At(ref))),
        entries_(static_cast<uint8_t*>(local.At(ring_->entries))) {}
  fabric::LocalProcess& local_;
  fabric::SharedRef ref_;
  RecvRing* const ring_;  // ring() in this process (the arena's blocks never move)
  uint8_t* entries_;      // its WQE array here (under post_mu_: Resize replaces it)
  SpinLock post_mu_;       // the owner's threads post one at a time (base/spin_lock.h)
  uint64_t head_seen_ = 0;  // the takers' head as last read (under post_mu_): re-read when full
  // Receive completions of this queue polled so far (NotePolled: one writer, the recv CQ's poll
  // under its lock); read by Post before the takers' head.
  std::atomic<uint64_t> polled_{0};
};

}  // namespace softverbs::transport
