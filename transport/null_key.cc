#include "transport/null_key.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "transport/key_table.h"

namespace softverbs::transport {

Result<uint64_t> NullRegion() {
  static std::mutex mu;
  static uint64_t region = 0;
  std::lock_guard lock(mu);
  if (region != 0) return region;
  // Untouched private anonymous pages read as zeros and cost nothing until written; the first
  // chunk is read-only so that no write can ever make a read through a null key non-zero.
  void* p = mmap(nullptr, 2 * kNullChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Status(ENOMEM, std::string("no address space for the null region: ") + strerror(errno));
  if (mprotect(p, kNullChunk, PROT_READ) != 0) {
    munmap(p, 2 * kNullChunk);
    return Status(ENOMEM, std::string("the null region's zero chunk cannot be made read-only: ") + strerror(errno));
  }
  region = reinterpret_cast<uint64_t>(p);
  return region;
}

}  // namespace softverbs::transport
