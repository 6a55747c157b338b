// The initiator's mappings of peers' shared backings (fabric/host/shared_backing.h): a peer's
// registration on a MAP_SHARED file or SysV segment is reached by memcpy through a mapping of
// the same file in this process, made once per (owner incarnation, file) and kept in a bounded
// LRU cache. The file's descriptor is borrowed from the owner with pidfd_getfd (a SysV segment
// is attached by its id), checked to be the file the owner published, and closed once mapped.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "base/status.h"
#include "fabric/host/peer_process.h"
#include "fabric/host/shared_backing.h"

namespace softverbs::fabric {

// A backing as a record names it, owner included: the cache key.
struct BackingId {
  uint64_t owner = 0;  // ProcessToken::raw() of the owner
  BackingKind kind = BackingKind::kNone;
  int32_t handle = -1;
  uint32_t dev = 0;
  uint64_t tag = 0;
  uint64_t ino = 0;
  friend bool operator==(const BackingId&, const BackingId&) = default;
};
// The id of `record`'s backing, owned by `owner`.
BackingId IdOf(uint64_t owner, const BackingRecord& record);

// One mapping of a whole file (or segment) in this process: [0, size) of it at base().
class BackingWindow {
 public:
  BackingWindow(uint8_t* base, uint64_t size, bool sysv, bool can_shrink)
      : base_(base), size_(size), sysv_(sysv), can_shrink_(can_shrink) {}
  ~BackingWindow();
  BackingWindow(const BackingWindow&) = delete;
  BackingWindow& operator=(const BackingWindow&) = delete;
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  bool Holds(uint64_t offset, uint64_t length) const { return offset <= size_ && length <= size_ - offset; }
  // Whether [0, size) may stop being backed while mapped: a file without F_SEAL_SHRINK can be
  // truncated under the mapping (copies through it run under the SIGBUS guard, fault_guard.h).
  // A sealed file (softverbs' own moves of private memory seal theirs) and a SysV segment
  // (never resized; IPC_RMID keeps attachments) cannot: their copies need no guard.
  bool can_shrink() const { return can_shrink_; }

 private:
  uint8_t* base_;
  uint64_t size_;
  bool sysv_;  // shmdt instead of munmap
  bool can_shrink_;
};

namespace internal {
// Most accesses of a thread reach the window it reached last: found without the cache's lock
// while the cache has not changed since (any insertion, eviction or forgetting moves its
// generation). Trivially destructible, so that a borrow costs no call (a thread_local with a
// destructor is reached through an init wrapper); the reference that keeps `window` mapped,
// evicted or not, is a thread_local of backing_maps.cc.
struct ThreadHit {
  uint64_t maps = 0;  // BackingMaps::instance_
  uint64_t generation = 0;
  BackingId id;
  const BackingWindow* window = nullptr;
  uint32_t borrows = 0;  // live BorrowedWindows of `window`
};
extern constinit thread_local ThreadHit t_backing_hit;
}  // namespace internal

// A window of the calling thread's cache entry, used without taking a reference
// (BackingMaps::Borrow): while a borrow lives, the thread's entry -- which keeps the window
// mapped -- is not replaced. Null when nothing was borrowed. One thread's, never passed on.
class BorrowedWindow {
 public:
  BorrowedWindow() = default;
  explicit BorrowedWindow(const BackingWindow* w) : w_(w) {
    if (w_ != nullptr) ++internal::t_backing_hit.borrows;
  }
  ~BorrowedWindow() {
    if (w_ != nullptr) --internal::t_backing_hit.borrows;
  }
  BorrowedWindow(BorrowedWindow&& o) noexcept : w_(std::exchange(o.w_, nullptr)) {}
  BorrowedWindow& operator=(BorrowedWindow&& o) noexcept {
    if (this != &o) {
      if (w_ != nullptr) --internal::t_backing_hit.borrows;
      w_ = std::exchange(o.w_, nullptr);
    }
    return *this;
  }
  BorrowedWindow(const BorrowedWindow&) = delete;
  BorrowedWindow& operator=(const BorrowedWindow&) = delete;
  const BackingWindow* get() const { return w_; }
  explicit operator bool() const { return w_ != nullptr; }

 private:
  const BackingWindow* w_ = nullptr;
};

class BackingMaps {
 public:
  static constexpr size_t kDefaultCapacity = 64;
  explicit BackingMaps(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}

  // The mapping of `id`'s backing holding [offset, +length), mapping it on first use (through
  // `owner`, the process id.owner names). An error when it cannot be reached with certainty:
  // the descriptor is gone or names another file, the file is shorter than the range (a memcpy
  // beyond its end would raise SIGBUS), the segment is another one; the caller then copies with
  // process_vm_writev/readv. A window stays valid while the caller holds it, evicted or not.
  Result<std::shared_ptr<const BackingWindow>> Get(PeerProcess& owner, const BackingId& id, uint64_t offset,
                                                   uint64_t length);
  // The window this thread reached last through Get, if it is `id`'s and holds [offset,
  // +length) and the cache has not changed since; empty otherwise (then Get). Costs no locked
  // instruction: Get's shared_ptr copy and release are two per access.
  BorrowedWindow Borrow(const BackingId& id, uint64_t offset, uint64_t length) const {
    const internal::ThreadHit& hit = internal::t_backing_hit;
    if (hit.maps == instance_ && hit.id == id && hit.generation == generation_.load(std::memory_order_acquire) &&
        hit.window != nullptr && offset + length >= offset && hit.window->Holds(offset, length))
      return BorrowedWindow(hit.window);
    return {};
  }
  // Unmaps the windows of owners that have exited (done on every miss); returns how many.
  size_t ForgetDead();
  // Drops `window` from the cache (a copy through it faulted: the file shrank under it), so the
  // next access maps the file again -- and finds out its new size.
  void Forget(const BackingWindow* window);
  size_t size() const;

  // The cache this process's initiators share.
  static BackingMaps& ForThisProcess();

 private:
  struct IdHash {
    size_t operator()(const BackingId& id) const;
  };
  using Entry = std::pair<BackingId, std::shared_ptr<const BackingWindow>>;
  Result<std::shared_ptr<const BackingWindow>> Map(PeerProcess& owner, const BackingId& id, uint64_t end);
  void Insert(const BackingId& id, std::shared_ptr<const BackingWindow> window);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<BackingId, std::list<Entry>::iterator, IdHash> index_;
  // Moves at every change of the cache: a thread's last hit is good while it has not moved (a
  // thread keeps that one window mapped until its next access after a change).
  std::atomic<uint64_t> generation_{0};
  // Names this cache to the threads' last hits (a cache made later at the same address is
  // another one: tests make several).
  const uint64_t instance_ = NextInstance();
  static uint64_t NextInstance();
};

}  // namespace softverbs::fabric
