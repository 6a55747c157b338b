#include "core/cq.h"

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "core/context.h"
#include "core/cq_moderation.h"
#include "core/device_limits.h"
#include "core/qp.h"
#include "transport/key_table.h"
#include "transport/work_request.h"
#include "transport/wire/wire_fabric.h"

namespace softverbs::core {

using transport::CqEntry;
using transport::CqRingPush;
using transport::kCqArmNext;
using transport::kCqArmSolicited;
using transport::PushOutcome;

namespace {

Status CheckCqe(int cqe) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > DeviceLimits::kMaxCqe)
    return Invalid("cqe " + std::to_string(cqe) + " is outside 1.." + std::to_string(DeviceLimits::kMaxCqe));
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CompChannel

Result<std::unique_ptr<CompChannel>> CompChannel::Create(Context& context) {
  auto fd = EventFd::Create();
  if (!fd.ok()) return fd.status();
  return std::unique_ptr<CompChannel>(new CompChannel(context, std::move(fd.value()), context.local().NewFdTag()));
}

void CompChannel::Attach(Cq* cq) {
  std::lock_guard lock(mu_);
  cqs_.push_back(cq);
  users_.Acquire();
}

void CompChannel::Detach(Cq* cq) {
  std::lock_guard lock(mu_);
  std::erase(cqs_, cq);
  users_.Release();
}

Result<Cq*> CompChannel::Wait() {
  // A producer (this process or a sender elsewhere) marks the CQ fired, then signals the fd. The
  // fd is cleared before the marks are read: a signal that arrives after the clear stays, and
  // one that was cleared belongs to a mark the scan sees -- no wake-up is lost.
  for (;;) {
    {
      std::lock_guard lock(mu_);
      fd_.Clear();
      Cq* found = nullptr;
      bool more = false;
      for (Cq* cq : cqs_) {
        if (found == nullptr) {
          if (cq->TakeFired()) found = cq;
        } else if (cq->fired()) {
          more = true;
        }
      }
      if (found != nullptr) {
        // Counted before the channel lock drops: ibv_destroy_cq detaches first, then waits for
        // the acknowledgements of every event it counted.
        found->CountEvent();
        if (more) fd_.Signal();  // other CQs' events are still pending: stay readable
        return found;
      }
    }
    if (int err = fd_.Wait(); err != 0)
      return Status(err, err == EAGAIN ? "no completion event is pending (the channel fd is non-blocking)"
                                       : "waiting on the channel fd failed");
  }
}

// ---------------------------------------------------------------------------------------------
// Cq

Result<std::unique_ptr<Cq>> Cq::Create(Context& context, int cqe, CompChannel* channel, int comp_vector,
                                       uint32_t stamp) {
  SV_RETURN_IF_ERROR(CheckCqe(cqe));
  if (comp_vector != 0)
    return Invalid("comp_vector " + std::to_string(comp_vector) + " is not below num_comp_vectors 1");
  // The kernel looks the channel's fd up among the objects of the context's own uverbs file
  // (rdma_core.c lookup_get_fd_uobject: "uobject->ufile != ufile" -> EBADF): a channel created on
  // another ibv_context is not one of them.
  if (channel != nullptr && &channel->context() != &context)
    return Status(EBADF, "the completion channel (fd " + std::to_string(channel->fd()) +
                             ") was created on another ibv_context; the kernel refuses it with EBADF");
  auto quota = QuotaHold::Take(QuotaKind::kCq);
  if (!quota.ok()) return quota.status();
  fabric::LocalProcess* local = &context.local();
  auto ring_ref = local->Allocate(sizeof(CqRing));
  if (!ring_ref.ok()) return ring_ref.status();
  auto entries = local->Allocate(sizeof(CqEntry) * static_cast<size_t>(cqe));
  if (!entries.ok()) {
    local->Free(*ring_ref, sizeof(CqRing));
    return entries.status();
  }
  auto* ring = static_cast<CqRing*>(local->At(*ring_ref));
  ring->lock.Init();
  ring->capacity = static_cast<uint32_t>(cqe);
  ring->channel_fd = channel ? channel->fd() : -1;
  ring->channel_tag = channel ? channel->tag() : 0;
  ring->stamp = stamp;
  ring->entries = *entries;
  transport::CqEntriesMarkEmpty(static_cast<CqEntry*>(local->At(*entries)), ring->capacity, 0, ring->capacity);
  ring->mod_count = ring->mod_period_us = 0;
  ring->mod_pending = 0;
  ring->timer_fd = -1;
  std::unique_ptr<Cq> cq(new Cq(context, context.NewHandle(), channel, local, *ring_ref, std::move(quota.value())));
  if (channel != nullptr) channel->Attach(cq.get());
  return cq;
}

Cq::Cq(Context& context, uint32_t handle, CompChannel* channel, fabric::LocalProcess* local,
       fabric::SharedRef ring_ref, QuotaHold quota)
    : context_(context), handle_(handle), channel_(channel), local_(local), ring_ref_(ring_ref),
      quota_(std::move(quota)) {}

Cq::~Cq() {
  if (timer_ != nullptr) timer_->Remove(this);
  DetachFromChannel();
  CqRing& r = ring();
  {
    fabric::RobustLock lock(r.lock);
    r.channel_fd = -1;
    local_->Free(r.entries, sizeof(CqEntry) * r.capacity);
    r.capacity = 0;
  }
  local_->Free(ring_ref_, sizeof(CqRing));
}

uint32_t Cq::capacity() const {
  fabric::RobustLock lock(ring().lock);
  return ring().capacity;
}

uint32_t Cq::HeldLocked(const CqRing& r) {
  return static_cast<uint32_t>(r.tail.load(std::memory_order_relaxed) - r.head.load(std::memory_order_relaxed));
}

Status Cq::Resize(int cqe) {
  SV_RETURN_IF_ERROR(CheckCqe(cqe));
  std::lock_guard poll(poll_mu_);  // the owner's poll reads the entry array without the ring lock
  CqRing& r = ring();
  fabric::RobustLock lock(r.lock);
  const uint32_t held = HeldLocked(r);
  if (static_cast<uint32_t>(cqe) < held)
    return Invalid("cqe " + std::to_string(cqe) + " is below the " + std::to_string(held) +
                   " completions the CQ holds");
  auto fresh = local_->Allocate(sizeof(CqEntry) * static_cast<size_t>(cqe));
  if (!fresh.ok()) return fresh.status();
  auto* from = static_cast<CqEntry*>(local_->At(r.entries));
  auto* to = static_cast<CqEntry*>(local_->At(*fresh));
  const uint64_t head = r.head.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < held; ++i) to[i] = from[(head + i) % r.capacity];
  transport::CqEntriesMarkWritten(to, static_cast<uint32_t>(cqe), 0, held);
  transport::CqEntriesMarkEmpty(to, static_cast<uint32_t>(cqe), held, static_cast<uint32_t>(cqe));
  local_->Free(r.entries, sizeof(CqEntry) * r.capacity);
  // (Atomic stores: Poll's unlocked look at the next entry reads both.)
  std::atomic_ref<fabric::SharedRef>(r.entries).store(*fresh, std::memory_order_relaxed);
  std::atomic_ref<uint32_t>(r.capacity).store(static_cast<uint32_t>(cqe), std::memory_order_relaxed);
  r.head.store(0, std::memory_order_relaxed);
  r.head_seen = 0;
  r.tail.store(held, std::memory_order_release);
  return Status::Ok();
}

void Cq::AttachQp(Qp* qp) {
  std::lock_guard lock(qps_mu_);
  qps_.push_back(qp);
  attached_.store(static_cast<uint32_t>(qps_.size()), std::memory_order_relaxed);
}

void Cq::DetachQp(Qp* qp) {
  {
    std::lock_guard poll(poll_mu_);  // (no poll notes a receive of a QP going away)
    PolledQueue& q = polled_[qp->qp_num() % kPolledQueues];
    if (q.qpn == qp->qp_num()) q = PolledQueue{};
  }
  std::lock_guard lock(qps_mu_);
  std::erase(qps_, qp);
  attached_.store(static_cast<uint32_t>(qps_.size()), std::memory_order_relaxed);
}

void Cq::FindPolledQueue(uint32_t qp_num, PolledQueue* q) {
  std::lock_guard lock(qps_mu_);
  *q = PolledQueue{qp_num, nullptr};
  for (Qp* qp : qps_)
    if (qp->qp_num() == qp_num && qp->init().recv_cq == this) q->rq = qp->own_recv_queue();
}

int Cq::Poll(Completion* out, int max, transport::TmInfo* tm) {
  return PollWith(max, [&, i = 0](const Completion& c, const CqEntry& entry) mutable {
    out[i] = c;
    if (tm != nullptr) tm[i] = (c.wc_flags & transport::wc_flag::kTmMatch) ? entry.tm : transport::TmInfo{};
    ++i;
  });
}

void Cq::ApplyAttention() {
  CqRing& r = ring();
  if (r.attention.exchange(0) == 0) return;
  ReportOverrun();
  std::lock_guard lock(qps_mu_);
  for (Qp* qp : qps_) qp->ApplyPendingError();
}

bool Cq::EntryReady() const {
  // The owner's look without the ring lock: entries are found by their stamps
  // (transport/cq_ring.h), so an empty CQ costs a few loads, the last of a line producers write
  // only to publish. A resize racing this look is decided by the locked take (it stores the
  // array and its capacity atomically).
  CqRing& r = ring();
  const fabric::SharedRef ref = std::atomic_ref<fabric::SharedRef>(r.entries).load(std::memory_order_relaxed);
  const uint32_t capacity = std::atomic_ref<uint32_t>(r.capacity).load(std::memory_order_relaxed);
  return transport::CqEntryAt(static_cast<CqEntry*>(local_->At(ref)), capacity,
                              r.head.load(std::memory_order_relaxed)) != nullptr;
}

bool Cq::BusyPollWire() {
  // The caller, spinning on its CQ, takes what its sockets hold (busy polling, docs/wire.md)
  // instead of waiting for the receive thread.
  transport::WireFabric* wire = transport::WireFabric::Receiving();
  if (wire == nullptr || !wire->PollOnce()) return false;
  return EntryReady();
}

void Cq::ScatterLanding(const CqEntry& entry, Completion* c) {
  // The sender checked the pieces against this process's keys when it delivered; the MR may
  // have been deregistered since, so each piece is checked again. Counted as an own write
  // before the check: Mr's withdrawal clears the key, then reads the count with a
  // read-modify-write, so either it sees this write in flight, or this check sees the key gone.
  std::atomic<uint32_t>& own_writes = local_->own_writes();
  own_writes.fetch_add(1, std::memory_order_acq_rel);
  const uint8_t* from = entry.landing;
  const uint8_t* const end = entry.landing + std::min<uint32_t>(entry.landing_length, transport::kLandingBytes);
  bool placed = true;
  for (uint32_t i = 0; placed && i < transport::CqEntryPieces(entry) && i < transport::kLandingPieces; ++i) {
    const transport::LandingPiece p = transport::CqEntryPiece(entry, i);
    // The key as the table holds it now: the kept view while its seqlock count and key are
    // unchanged (HeldKey::Current, read after own_writes as a fresh read would be), else read.
    if (landing_key_.key() != p.lkey || p.lkey == 0 || !landing_key_.Current()) [[unlikely]]
      landing_key_.Learn(local_->registry(), p.lkey);
    const transport::KeyView& k = landing_key_.view();
    // Never an indirect or null key: a receive through one is copied by the sender, not landed
    // (transport/responder.cc), so one here would be a slot reused since -- a lost MR.
    placed = landing_key_.key() == p.lkey && p.lkey != 0 && k.owner_process_slot() == local_->slot() &&
             !k.indirect() && !k.window() && !k.null_key() && (k.access & access::kLocalWrite) &&
             transport::RangeWithin(k.addr, k.length, p.addr, p.length) && p.length <= static_cast<uint64_t>(end - from) &&
             transport::OnDemandPresent(local_->registry(), k, p.addr, p.length, true);
    if (placed) {
      memcpy(reinterpret_cast<void*>(p.addr), from, p.length);
      from += p.length;
    } else {
      // IBA 10.6.3.1: the receive buffer is no longer a valid local write target.
      SV_LOG(kError, "ibv_poll_cq(cq 0x%x): receive buffer of qp 0x%x lost its MR (lkey 0x%x) before the "
             "message was placed: IBV_WC_LOC_PROT_ERR", handle_, c->qp_num, p.lkey);
    }
  }
  own_writes.fetch_sub(1, std::memory_order_release);
  if (!placed) {
    c->status = transport::wc_status::kLocProtErr;
    c->byte_len = 0;
    FailQp(c->qp_num);
  }
}

void Cq::FailQp(uint32_t qp_num) {
  std::lock_guard lock(qps_mu_);
  for (Qp* qp : qps_) {
    // A DCT serves many initiators and never enters ERR for one of them (core/dc.h).
    if (qp->qp_num() != qp_num || qp->endpoint().dct) continue;
    qp->endpoint().remote_error.store(1, std::memory_order_release);
    ring().attention.store(1, std::memory_order_release);
  }
}

uint32_t Cq::RemoveEntriesOf(uint32_t qp_num) {
  std::lock_guard poll(poll_mu_);
  CqRing& r = ring();
  fabric::RobustLock lock(r.lock);
  auto* e = static_cast<CqEntry*>(local_->At(r.entries));
  const uint64_t head = r.head.load(std::memory_order_relaxed);
  const uint32_t held = HeldLocked(r);
  uint32_t kept = 0;
  for (uint32_t i = 0; i < held; ++i) {
    CqEntry& from = e[(head + i) % r.capacity];
    if (from.qp_num == qp_num) {
      const Completion c = transport::CqEntryRead(from);
      SV_LOG(kDebug, "cq 0x%x: removing the completion of qp 0x%x (wr_id 0x%llx, status %u, opcode %u)", handle_,
             qp_num, static_cast<unsigned long long>(c.wr_id), c.status, c.opcode);
      continue;
    }
    if (kept != i) transport::CqEntryMoveUnstamped(e[(head + kept) % r.capacity], from);
    ++kept;
  }
  // The kept entries are restamped at their new positions, the freed slots marked unwritten.
  transport::CqEntriesMarkWritten(e, r.capacity, head, head + kept);
  transport::CqEntriesMarkEmpty(e, r.capacity, head + kept, head + held);
  r.tail.store(head + kept, std::memory_order_relaxed);
  return held - kept;
}

bool Cq::TakeOverrun() {
  CqRing& r = ring();
  fabric::RobustLock lock(r.lock);
  return std::exchange(r.overrun, 0u) != 0;
}

void Cq::ReportOverrun() {
  // IBA 11.6.2 / ibv_get_async_event(3): a CQ that overran is in error, once per overrun.
  if (TakeOverrun()) context_.PostAsyncEvent({kEventCqErr, AsyncEvent::Subject::kCq, user_handle_, 0});
}

bool Cq::TakeFired() { return ring().fired.exchange(0, std::memory_order_acq_rel) != 0; }
bool Cq::fired() const { return ring().fired.load(std::memory_order_acquire) != 0; }

void Cq::DetachFromChannel() {
  if (channel_ != nullptr) channel_->Detach(this);
  channel_ = nullptr;
  CqRing& r = ring();
  fabric::RobustLock lock(r.lock);
  r.channel_fd = -1;
}

Status Cq::RequestNotify(bool solicited_only) {
  // A CQ without a channel may be armed (hardware accepts it); the event then goes nowhere.
  CqRing& r = ring();
  fabric::RobustLock lock(r.lock);
  // Arming for "next" is stronger than "solicited" and stays so until an event fires.
  if (r.arm != kCqArmNext) r.arm = solicited_only ? kCqArmSolicited : kCqArmNext;
  return Status::Ok();
}

Status Cq::Moderate(uint32_t count, uint32_t period_us) {
  if (count > DeviceLimits::kMaxCqModCount)
    return Invalid("cq_count " + std::to_string(count) + " exceeds cq_mod_caps.max_cq_count " +
                   std::to_string(DeviceLimits::kMaxCqModCount));
  if (period_us > DeviceLimits::kMaxCqModPeriodUs)
    return Invalid("cq_period " + std::to_string(period_us) + " us exceeds cq_mod_caps.max_cq_period " +
                   std::to_string(DeviceLimits::kMaxCqModPeriodUs) + " (mlx5_ib_modify_cq: EINVAL)");
  if (period_us != 0 && timer_ == nullptr) {
    auto timer = CqModerationTimer::Get(*local_);
    if (!timer.ok()) return timer.status();
    timer_ = *timer;
  }
  CqRing& r = ring();
  int fd = -1;
  {
    fabric::RobustLock lock(r.lock);
    r.mod_count = static_cast<uint16_t>(count);
    r.mod_period_us = static_cast<uint16_t>(period_us);
    if (timer_ != nullptr) {
      r.timer_fd = timer_->fd();
      r.timer_tag = timer_->tag();
    }
    // An event already waiting whose new limits are met (or gone) fires now rather than at a
    // completion that may never come; a new period is counted from the first completion.
    const bool met = (count <= 1 && period_us == 0) || (count != 0 && r.mod_pending >= count);
    if (r.arm != transport::kCqArmNone && r.mod_pending > 0 && met) {
      r.arm = transport::kCqArmNone;
      r.mod_pending = 0;
      if (r.channel_fd >= 0) {
        r.fired.store(1, std::memory_order_release);
        fd = r.channel_fd;
      }
    }
  }
  if (fd >= 0) EventFd::SignalFd(fd);
  if (timer_ != nullptr) timer_->Add(this);  // wakes it: a waiting period may have changed
  return Status::Ok();
}

uint64_t Cq::FireIfDue(uint64_t now) {
  CqRing& r = ring();
  int fd = -1;
  {
    fabric::RobustLock lock(r.lock);
    if (r.arm == transport::kCqArmNone || r.mod_pending == 0) return 0;
    // A wait without a period (it was turned off meanwhile) ends with its count only.
    if (r.mod_period_us == 0) return 0;
    const uint64_t due = r.mod_first_ns + r.mod_period_us * 1000ull;
    if (now < due) return due;
    r.arm = transport::kCqArmNone;
    r.mod_pending = 0;
    if (r.channel_fd >= 0) {
      r.fired.store(1, std::memory_order_release);
      fd = r.channel_fd;
    }
  }
  if (fd >= 0) EventFd::SignalFd(fd);
  return 0;
}

void Cq::CountEvent() {
  std::lock_guard lock(events_mu_);
  ++events_;
}

void Cq::AckEvents(unsigned int n) {
  std::lock_guard lock(events_mu_);
  acked_ += n;
  acked_cv_.notify_all();
}

void Cq::WaitForAcks() {
  std::unique_lock lock(events_mu_);
  if (acked_ < events_) {
    // ibv_destroy_cq(3) blocks until every event is acknowledged; say why we are waiting.
    SV_LOG(kWarn, "ibv_destroy_cq(cq 0x%x): waiting for %llu unacknowledged events (ibv_ack_cq_events)",
           handle_, static_cast<unsigned long long>(events_ - acked_));
    acked_cv_.wait(lock, [this] { return acked_ >= events_; });
  }
}

}  // namespace softverbs::core
