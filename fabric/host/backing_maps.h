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
  BackingWindow(uint8_t* base, uint64_t size, bool sysv) : base_(base), size_(size), sysv_(sysv) {}
  ~BackingWindow();
  BackingWindow(const BackingWindow&) = delete;
  BackingWindow& operator=(const BackingWindow&) = delete;
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  bool Holds(uint64_t offset, uint64_t length) const { return offset <= size_ && length <= size_ - offset; }

 private:
  uint8_t* base_;
  uint64_t size_;
  bool sysv_;  // shmdt instead of munmap
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
