// Completion queues and completion channels.
//
// A CQ's completions live in a CqRing in this process's shared arena (transport/cq_ring.h): the owner
// and senders in other processes push into it, the application polls it. Arming
// (ibv_req_notify_cq) makes the next matching completion raise one event on the CQ's channel,
// whose eventfd becomes readable (ibv_get_cq_event(3)), whichever process produced it.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/event_fd.h"
#include "base/spin_lock.h"
#include "base/status.h"
#include "transport/completion.h"
#include "transport/cq_ring.h"
#include "transport/key_table.h"
#include "transport/recv_queue.h"
#include "transport/work_request.h"
#include "core/object_quota.h"
#include "core/pd.h"
#include "fabric/host/host_directory.h"

namespace softverbs::core {

using transport::Completion;
using transport::CqRing;

class Context;
class Cq;
class CqModerationTimer;
class Qp;

class CompChannel {
 public:
  static Result<std::unique_ptr<CompChannel>> Create(Context& context);

  int fd() const { return fd_.fd(); }
  uint64_t tag() const { return tag_; }  // names this incarnation of fd() for peers
  const Context& context() const { return context_; }  // the context it was created on
  UseCount& users() { return users_; }  // CQs bound to it

  // ibv_get_cq_event: the CQ of the oldest event; blocks unless fd() is O_NONBLOCK.
  Result<Cq*> Wait();

 private:
  friend class Cq;
  CompChannel(const Context& context, EventFd fd, uint64_t tag)
      : context_(context), fd_(std::move(fd)), tag_(tag) {}
  void Attach(Cq* cq);
  void Detach(Cq* cq);

  const Context& context_;
  EventFd fd_;
  uint64_t tag_;
  std::mutex mu_;
  std::vector<Cq*> cqs_;  // the CQs whose events arrive here
  UseCount users_;
};

class Cq {
 public:
  // The ABI object wrapping this one (events name it to the application).
  void* user_handle() const { return user_handle_; }
  void set_user_handle(void* handle) { user_handle_ = handle; }

  // ibv_create_cq(3): 1 <= cqe <= max_cqe, comp_vector < num_comp_vectors, a channel of the
  // same context (EBADF otherwise, as the kernel's uverbs answers).
  // `stamp`: the transport::CqStamp clocks each completion carries (ibv_create_cq_ex wc_flags).
  static Result<std::unique_ptr<Cq>> Create(Context& context, int cqe, CompChannel* channel,
                                            int comp_vector, uint32_t stamp = transport::kCqStampNone);
  ~Cq();

  uint32_t handle() const { return handle_; }
  // The number of completions the CQ holds (>= what was asked: ibv_create_cq(3)).
  uint32_t capacity() const;
  CompChannel* channel() const { return channel_; }
  UseCount& users() { return users_; }  // QPs and SRQs that complete here
  // Where producers find the ring: this process's slot and the ring's SharedRef.
  fabric::SharedRef ring_ref() const { return ring_ref_; }

  // ibv_resize_cq(3): fails (EINVAL) if `cqe` is smaller than the completions held now.
  Status Resize(int cqe);

  // The QPs that complete here (a QP's pending error is applied when the CQ is polled).
  void AttachQp(Qp* qp);
  void DetachQp(Qp* qp);
  // Marks that an attached QP has an error to apply.
  void NeedAttention() { ring().attention.store(1, std::memory_order_release); }

  // Adds a completion produced by this process; false if the CQ is full (an overrun). Inline:
  // every signaled work request makes one.
  bool Push(const Completion& c) {
    transport::PushOutcome out = transport::CqRingPush(ring(), c, [this](fabric::SharedRef ref) { return local_->At(ref); });
    if (out.notify_fd >= 0) EventFd::SignalFd(out.notify_fd);
    return out.stored;
  }
  // Moves up to `max` completions into `out`; returns how many. `tm`, if given, receives each
  // one's tag matching info (zeros unless IBV_WC_TM_MATCH, as mlx5 reports).
  int Poll(Completion* out, int max, transport::TmInfo* tm = nullptr);
  // Poll, handing each completion to `take(const Completion&, const transport::CqEntry&)` in
  // place of a copy (ibv_poll_cq converts straight from the ring into the caller's ibv_wc).
  // `take` runs under the poll lock: it must not poll this CQ.
  template <typename Take>
  int PollWith(int max, Take&& take);
  // Drops the completions of QP `qp_num` (the QP moved to RESET: ibv_modify_qp, IBA 10.3.1; or
  // was destroyed); returns how many it held.
  uint32_t RemoveEntriesOf(uint32_t qp_num);
  // True once since the last call if a completion was lost because the CQ was full.
  bool TakeOverrun();
  // Posts IBV_EVENT_CQ_ERR if a completion was lost since the last report (by any producer).
  void ReportOverrun();

  // ibv_req_notify_cq(3).
  Status RequestNotify(bool solicited_only);

  // ibv_modify_cq(3) with IBV_CQ_MODERATE: the channel's event waits for `count` completions or
  // `period_us` after the first of them (0: that limit is off; both 0: no moderation). Above
  // cq_mod_caps (core/cq_moderation.h) EINVAL, as mlx5_ib_modify_cq.
  Status Moderate(uint32_t count, uint32_t period_us);
  // The moderation timer's check (core/cq_moderation.h): fires the event if the period of a
  // waiting one ended by `now` (DeviceClockNow); returns when it ends otherwise, 0 if none waits.
  uint64_t FireIfDue(uint64_t now);

  // ibv_destroy_cq: no event for this CQ is returned by the channel after this.
  void DetachFromChannel();

  // ibv_get_cq_event / ibv_ack_cq_events bookkeeping: ibv_destroy_cq waits for all acks.
  void CountEvent();
  void AckEvents(unsigned int n);
  void WaitForAcks();

 private:
  friend class CompChannel;
  Cq(Context& context, uint32_t handle, CompChannel* channel, fabric::LocalProcess* local,
     fabric::SharedRef ring_ref, QuotaHold quota);
  CqRing& ring() const { return *static_cast<CqRing*>(local_->At(ring_ref_)); }
  Completion* entries() const { return static_cast<Completion*>(local_->At(ring().entries)); }
  // Completions held (ring locked by the caller).
  static uint32_t HeldLocked(const CqRing& r);
  // A poll's work that is not taking entries: a QP's pending error (attention), and the wire's
  // busy poll when the ring is empty; whether the ring holds something now.
  void ApplyAttention();
  // The next entry is written (its stamp is its position's): the owner's look without the lock.
  bool EntryReady() const;
  bool BusyPollWire();
  // A QP whose receive completions were polled here and its own receive queue (null: none to
  // tell).
  struct PolledQueue {
    uint32_t qpn = 0;
    transport::RecvQueue* rq = nullptr;
  };
  // A receive completion of QP `qp_num` was polled (under poll_mu_): its own receive queue is
  // told (RecvQueue::NotePolled), found through a small cache of the QPs looked up -- while few
  // QPs are attached (kPolledScanLimit): a CQ many QPs complete on keeps its queues reading
  // their takers' head, as before, rather than look QPs up at every miss of the cache.
  void NotePolledReceive(uint32_t qp_num) {
    if (attached_.load(std::memory_order_relaxed) > kPolledScanLimit) return;
    PolledQueue& q = polled_[qp_num % kPolledQueues];
    if (q.qpn != qp_num) [[unlikely]] FindPolledQueue(qp_num, &q);
    if (q.rq != nullptr) q.rq->NotePolled();
  }
  void FindPolledQueue(uint32_t qp_num, PolledQueue* q);
  // Writes a landed message into the receive buffers named in `entry` (the owner's poll).
  void ScatterLanding(const transport::CqEntry& entry, Completion* c);
  // Marks QP `qp_num` (completing here) for ERR: a receive it was given could not be placed.
  void FailQp(uint32_t qp_num);
  // Collects the event a producer raised on this CQ (channel side).
  bool TakeFired();
  bool fired() const;

  Context& context_;
  const uint32_t handle_;
  CompChannel* channel_;
  fabric::LocalProcess* local_;
  fabric::SharedRef ring_ref_;
  QuotaHold quota_;  // one of max_cq
  UseCount users_;
  SpinLock poll_mu_;  // one consumer at a time (the ring's lock is for producers); never sleeps held
  // The key of the landed buffers ScatterLanding checked last, kept (under poll_mu_): a
  // receiver lands message after message in the same buffers (transport/receive_keys.h's idea).
  transport::HeldKey landing_key_;
  // The QPs looked up by NotePolledReceive, by QP number modulo kPolledQueues, under poll_mu_;
  // DetachQp forgets its QP.
  static constexpr uint32_t kPolledQueues = 8, kPolledScanLimit = 32;
  std::array<PolledQueue, kPolledQueues> polled_{};
  std::mutex qps_mu_;
  std::vector<Qp*> qps_;
  std::atomic<uint32_t> attached_{0};  // qps_.size(), read without qps_mu_
  std::mutex events_mu_;
  std::condition_variable acked_cv_;
  uint64_t events_ = 0;
  uint64_t acked_ = 0;
  void* user_handle_ = nullptr;
  CqModerationTimer* timer_ = nullptr;  // set once a period was asked for
};

template <typename Take>
int Cq::PollWith(int max, Take&& take) {
  CqRing& r = ring();
  // A QP of this CQ failed (its requester in the background, or a peer as responder): moved to
  // ERR now so its flush completions are here for this poll.
  if (r.attention.load(std::memory_order_relaxed) != 0) [[unlikely]] ApplyAttention();
  // Lock-free for the owner while the CQ is empty (EntryReady: the next entry's stamp), and the
  // wire's busy poll in a process that receives RoCEv2.
  if (max <= 0 || (!EntryReady() && !BusyPollWire())) return 0;
  std::lock_guard poll(poll_mu_);
  const uint64_t head = r.head.load(std::memory_order_relaxed);
  auto* e = static_cast<transport::CqEntry*>(local_->At(r.entries));
  int n = 0;
  for (const transport::CqEntry* entry;
       n < max && (entry = transport::CqEntryAt(e, r.capacity, head + static_cast<uint64_t>(n))) != nullptr; ++n) {
    Completion c = transport::CqEntryRead(*entry);
    if (entry->landing_length != 0) ScatterLanding(*entry, &c);  // its status changes if it cannot be placed
    if (c.opcode == transport::wc_opcode::kRecv || c.opcode == transport::wc_opcode::kRecvRdmaWithImm)
      NotePolledReceive(c.qp_num);  // (any status: a flushed or failed receive took its WQE too)
    take(c, *entry);
  }
  if (n != 0) r.head.store(head + static_cast<uint64_t>(n), std::memory_order_release);
  return n;
}

}  // namespace softverbs::core
