#include "transport/recv_queue.h"

#include <algorithm>
#include <cstring>

namespace softverbs::transport {
namespace {

// The `slots` slots of a fresh entry array hold no posted WQE: stamp 0, which no first-lap
// position matches (the ring's positions restart at 0 with a fresh array).
void MarkUnposted(uint8_t* base, uint32_t wqe_size, uint32_t slots) {
  for (uint32_t i = 0; i < slots; ++i) reinterpret_cast<RecvWqe*>(base + static_cast<size_t>(i) * wqe_size)->seq = 0;
}

}  // namespace

Result<std::unique_ptr<RecvQueue>> RecvQueue::Create(fabric::LocalProcess& local, uint32_t max_wr, uint32_t max_sge,
                                                     int async_fd, uint64_t async_tag) {
  auto ref = local.Allocate(sizeof(RecvRing));
  if (!ref.ok()) return ref.status();
  const uint32_t wqe_size = static_cast<uint32_t>(RecvWqeSize(max_sge));
  const uint32_t slots = max_wr == 0 ? 1 : max_wr;
  auto entries = local.Allocate(static_cast<size_t>(wqe_size) * slots);
  if (!entries.ok()) {
    local.Free(*ref, sizeof(RecvRing));
    return entries.status();
  }
  auto* ring = static_cast<RecvRing*>(local.At(*ref));
  ring->lock.Init();
  ring->max_wr = max_wr;
  ring->max_sge = max_sge;
  ring->wqe_size = wqe_size;
  ring->async_fd = async_fd;
  ring->async_tag = async_tag;
  ring->entries = *entries;
  ring->tm = {};
  MarkUnposted(static_cast<uint8_t*>(local.At(*entries)), wqe_size, slots);
  return std::unique_ptr<RecvQueue>(new RecvQueue(local, *ref));
}

RecvQueue::~RecvQueue() {
  RecvRing& r = ring();
  {
    fabric::RobustLock lock(r.lock);
    local_.Free(r.entries, static_cast<size_t>(r.wqe_size) * (r.max_wr == 0 ? 1 : r.max_wr));
    r.head.store(r.tail.load(std::memory_order_relaxed), std::memory_order_relaxed);
    r.max_wr = 0;
  }
  local_.Free(ref_, sizeof(RecvRing));
}

Status RecvQueue::Post(uint64_t wr_id, const RecvSge* sge, uint32_t num_sge) {
  std::lock_guard post(post_mu_);
  RecvRing& r = ring();
  if (num_sge > r.max_sge)
    return Invalid("num_sge " + std::to_string(num_sge) + " exceeds max_recv_sge " + std::to_string(r.max_sge));
  const uint64_t tail = r.tail.load(std::memory_order_relaxed);
  if (tail - head_seen_ >= r.max_wr) {
    // First the slots this process saw completed (its own count: a program reposting after each
    // poll, perftest's way with a full queue, finds room here), then the takers' head, a line
    // they write at every take (one more cache line crossing the cores per message).
    head_seen_ = std::max(head_seen_, polled_.load(std::memory_order_acquire));
    if (tail - head_seen_ >= r.max_wr) head_seen_ = r.head.load(std::memory_order_acquire);
    if (tail - head_seen_ >= r.max_wr)
      return Status(ENOMEM, "the receive queue is full (" + std::to_string(r.max_wr) + " WRs outstanding)");
  }
  auto* w = reinterpret_cast<RecvWqe*>(entries_ + static_cast<size_t>(RecvSlot(tail, r.max_wr)) * r.wqe_size);
  w->wr_id = wr_id;
  w->num_sge = num_sge;
  if (num_sge == 1) [[likely]]
    w->sge[0] = sge[0];
  else if (num_sge != 0)
    memcpy(w->sge, sge, sizeof(RecvSge) * num_sge);
  std::atomic_ref<uint32_t>(w->seq).store(static_cast<uint32_t>(tail + 1), std::memory_order_release);
  r.tail.store(tail + 1, std::memory_order_release);
  return Status::Ok();
}

TakenWqe RecvQueue::Take() {
  return RecvRingTake(ring(), [this](fabric::SharedRef ref) { return local_.At(ref); });
}

void RecvQueue::Clear() {
  std::lock_guard post(post_mu_);
  RecvRing& r = ring();
  fabric::RobustLock lock(r.lock);
  r.head.store(r.tail.load(std::memory_order_relaxed), std::memory_order_release);
}

Status RecvQueue::Resize(uint32_t max_wr) {
  std::lock_guard post(post_mu_);
  RecvRing& r = ring();
  fabric::RobustLock lock(r.lock);
  const uint64_t head = r.head.load(std::memory_order_relaxed);
  const uint32_t held = static_cast<uint32_t>(r.tail.load(std::memory_order_relaxed) - head);
  if (max_wr < held)
    return Invalid("max_wr " + std::to_string(max_wr) + " is below the " + std::to_string(held) + " WRs posted");
  auto fresh = local_.Allocate(static_cast<size_t>(r.wqe_size) * max_wr);
  if (!fresh.ok()) return fresh.status();
  auto* from = static_cast<uint8_t*>(local_.At(r.entries));
  auto* to = static_cast<uint8_t*>(local_.At(*fresh));
  MarkUnposted(to, r.wqe_size, max_wr);
  for (uint32_t i = 0; i < held; ++i) {
    uint8_t* slot = to + static_cast<size_t>(RecvSlot(i, max_wr)) * r.wqe_size;
    memcpy(slot, from + static_cast<size_t>(RecvSlot(head + i, r.max_wr)) * r.wqe_size, r.wqe_size);
    reinterpret_cast<RecvWqe*>(slot)->seq = i + 1;  // its new position
  }
  local_.Free(r.entries, static_cast<size_t>(r.wqe_size) * (r.max_wr == 0 ? 1 : r.max_wr));
  r.entries = *fresh;
  entries_ = to;
  r.max_wr = max_wr;
  r.head.store(0, std::memory_order_relaxed);
  r.tail.store(held, std::memory_order_release);
  head_seen_ = 0;
  polled_.store(0, std::memory_order_relaxed);  // (positions restart; an SRQ's polls are not noted anyway)
  return Status::Ok();
}

void RecvQueue::SetLimit(uint32_t limit) {
  RecvRing& r = ring();
  fabric::RobustLock lock(r.lock);
  r.srq_limit = limit;
}

uint32_t RecvQueue::count() const {
  const RecvRing& r = ring();
  return static_cast<uint32_t>(r.tail.load(std::memory_order_acquire) - r.head.load(std::memory_order_acquire));
}

}  // namespace softverbs::transport
