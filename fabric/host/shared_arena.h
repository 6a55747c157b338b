// Shared memory a process offers to its peers: the rings a sender writes into (receive queues,
// completion queues) live here. A process owns one arena made of memfd segments; a peer maps a
// segment by borrowing the memfd with pidfd_getfd. Nothing has a name in /dev/shm, so nothing
// outlives its process: when the owner dies, the memory goes with the last mapping.
//
// Locations inside an arena are SharedRefs (segment, offset): every process maps a segment at its
// own address, so shared structures never hold pointers.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"

namespace softverbs::fabric {

struct SharedRef {
  uint32_t segment = 0;  // index of the segment in the owner's arena
  uint32_t offset = 0;   // byte offset inside it; 0 is never a valid object
  bool valid() const { return offset != 0; }
  friend bool operator==(SharedRef a, SharedRef b) { return a.segment == b.segment && a.offset == b.offset; }
};

// The owner's side: allocates blocks in its segments.
class SharedArena {
 public:
  // Segments are this large, or as large as one block that needs more (up to kMaxBlock). They
  // are sparse: only touched pages use memory.
  static constexpr size_t kSegmentSize = 64u << 20;
  static constexpr size_t kMaxBlock = 2048u << 20;
  static constexpr uint32_t kMaxSegments = 8;
  static constexpr size_t kAlign = 64;

  SharedArena() = default;
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  // A zeroed block of `size` bytes (rounded up to kAlign); ENOMEM when every segment is full.
  Result<SharedRef> Allocate(size_t size);
  // Returns a block; `size` is the size it was allocated with.
  void Free(SharedRef ref, size_t size);

  // This process's address of `ref` (inline: every poll and post resolves a few refs).
  void* At(SharedRef ref) const { return base_[ref.segment].load(std::memory_order_acquire) + ref.offset; }
  // The memfd of segment `index` (peers borrow it), or -1.
  int SegmentFd(uint32_t index) const;

 private:
  struct Segment {
    UniqueFd fd;
    Mapping map;
    size_t size = 0;
    // Free blocks (offset, size), kept sorted by offset and coalesced.
    std::vector<std::pair<uint32_t, uint32_t>> free;
  };
  Status AddSegment(size_t min_size);

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Segment>> segments_;
  // Each segment's base address, published once it is mapped: At() reads it without the lock
  // (segments are never unmapped while the arena lives).
  std::array<std::atomic<uint8_t*>, kMaxSegments> base_{};
};

// A peer's side: the segments of other processes this process has mapped.
class RemoteSegment {
 public:
  // Maps the memfd `fd` (borrowed from the owner), all of it.
  static Result<std::shared_ptr<RemoteSegment>> Map(int fd);
  // This process's address of `offset`, or nullptr if it lies outside the segment.
  void* At(uint32_t offset) const {
    return offset < map_.size() ? static_cast<uint8_t*>(map_.get()) + offset : nullptr;
  }

 private:
  explicit RemoteSegment(Mapping map) : map_(std::move(map)) {}
  Mapping map_;
};

}  // namespace softverbs::fabric
