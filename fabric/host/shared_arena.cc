#include "fabric/host/shared_arena.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace softverbs::fabric {

Status SharedArena::AddSegment(size_t min_size) {
  if (segments_.size() >= kMaxSegments)
    return NoMemory("the shared arena is full (" + std::to_string(kMaxSegments) + " segments of " +
                    std::to_string(kSegmentSize >> 20) + " MiB)");
  UniqueFd fd(memfd_create("softverbs-arena", MFD_CLOEXEC));
  if (!fd.valid()) return Status(errno, std::string("memfd_create: ") + strerror(errno));
  const size_t size = std::max(kSegmentSize, (min_size + kAlign + 0xfffff) & ~size_t{0xfffff});
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) return Status(errno, std::string("ftruncate: ") + strerror(errno));
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return Status(errno, std::string("mmap: ") + strerror(errno));
  auto seg = std::make_unique<Segment>();
  seg->fd = std::move(fd);
  seg->map = Mapping(p, size);
  seg->size = size;
  // Offset 0 stays unused so that a zero SharedRef means "none".
  seg->free.emplace_back(static_cast<uint32_t>(kAlign), static_cast<uint32_t>(size - kAlign));
  base_[segments_.size()].store(static_cast<uint8_t*>(p), std::memory_order_release);
  segments_.push_back(std::move(seg));
  return Status::Ok();
}

Result<SharedRef> SharedArena::Allocate(size_t size) {
  if (size == 0 || size > kMaxBlock) return Invalid("shared block of " + std::to_string(size) + " bytes");
  const uint32_t want = static_cast<uint32_t>((size + kAlign - 1) & ~(kAlign - 1));
  std::lock_guard lock(mu_);
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t s = 0; s < segments_.size(); ++s) {
      auto& free = segments_[s]->free;
      for (auto it = free.begin(); it != free.end(); ++it) {
        if (it->second < want) continue;  // first fit
        uint32_t offset = it->first;
        it->first += want;
        it->second -= want;
        if (it->second == 0) free.erase(it);
        memset(static_cast<uint8_t*>(segments_[s]->map.get()) + offset, 0, want);
        return SharedRef{s, offset};
      }
    }
    if (pass == 0) SV_RETURN_IF_ERROR(AddSegment(want));
  }
  return NoMemory("no shared block of " + std::to_string(want) + " bytes");
}

void SharedArena::Free(SharedRef ref, size_t size) {
  const uint32_t len = static_cast<uint32_t>((size + kAlign - 1) & ~(kAlign - 1));
  std::lock_guard lock(mu_);
  auto& free = segments_[ref.segment]->free;
  auto it = std::lower_bound(free.begin(), free.end(), std::make_pair(ref.offset, 0u));
  it = free.insert(it, {ref.offset, len});
  // Coalesce with the next and the previous block.
  if (auto next = it + 1; next != free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free.erase(next);
  }
  if (it != free.begin()) {
    auto prev = it - 1;
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free.erase(it);
    }
  }
}

int SharedArena::SegmentFd(uint32_t index) const {
  std::lock_guard lock(mu_);
  return index < segments_.size() ? segments_[index]->fd.get() : -1;
}

Result<std::shared_ptr<RemoteSegment>> RemoteSegment::Map(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status(errno, std::string("fstat of a peer's segment: ") + strerror(errno));
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status(errno, std::string("mmap of a peer's segment: ") + strerror(errno));
  return std::shared_ptr<RemoteSegment>(new RemoteSegment(Mapping(p, size)));
}

}  // namespace softverbs::fabric
