#include "fabric/host/private_share.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "base/log.h"
#include "fabric/host/maps_scan.h"
#include "fabric/host/process_token.h"
#include "fabric/host/world_stop.h"

namespace softverbs::fabric {
namespace {

// One move: pages [lo, hi) of this process, now mapped from `memfd` at offset (address - lo).
struct Area {
  uint64_t lo = 0, hi = 0;
  UniqueFd memfd;
  uint32_t dev = 0;
  uint64_t ino = 0;
  pid_t pid = 0;  // a child of fork() has private copies: none of its moves
  RangeBusyFn busy = nullptr;
  void* ctx = nullptr;
  std::weak_ptr<const BackingFile> file;  // expired once every registration on it is gone
  // The child's copy, taken by the fork handler in the parent.
  uint8_t* snapshot = nullptr;
  MapsPiece snapshot_pieces[kMaxMapsPieces];
  size_t snapshot_count = 0;
};

std::mutex g_mu;                              // the moves, and every scan (maps_scan.cc's buffer)
// This process's moves, live or lingering. Never destroyed: a registration released by an exit
// handler after static destructors still finds it.
std::vector<std::shared_ptr<Area>>& g_areas = *new std::vector<std::shared_ptr<Area>>;
PrivateShareCounters g_counters;
MapsPiece g_pieces[kMaxMapsPieces];          // scratch, under g_mu

uint64_t PageSize() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

// The kernel copies (raw system calls: no sanitizer interceptor reads the application's bytes,
// which may include other live data on the same pages, and an unmapped page is EFAULT, not a
// signal).
bool CopyAll(long nr, int fd, void* buf, uint64_t n, uint64_t off) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const long done = syscall(nr, fd, p, std::min<uint64_t>(n, 1ull << 30), static_cast<off_t>(off));
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return false;
    p += done;
    off += static_cast<uint64_t>(done);
    n -= static_cast<uint64_t>(done);
  }
  return true;
}

void* At(uint64_t addr) { return reinterpret_cast<void*>(addr); }

// The memory system calls themselves, not libc's symbols: UCX's memory hooks (ucm) and other
// interposers of mmap / munmap / mremap / madvise would take these remaps for the application
// unmapping its memory (and invalidate their registration caches), while the application sees
// no change at all. Raw system calls are also what may run while the other threads are parked.
void* Mmap(void* addr, uint64_t len, int prot, int flags, int fd, uint64_t off) {
  const long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
  return (r < 0 && r > -4096) ? MAP_FAILED : reinterpret_cast<void*>(r);
}
int Munmap(void* addr, uint64_t len) { return static_cast<int>(syscall(SYS_munmap, addr, len)); }
void* Mremap(void* from, uint64_t len, void* to) {
  const long r = syscall(SYS_mremap, from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
  return (r < 0 && r > -4096) ? MAP_FAILED : reinterpret_cast<void*>(r);
}
int Mprotect(void* addr, uint64_t len, int prot) { return static_cast<int>(syscall(SYS_mprotect, addr, len, prot)); }
int Madvise(void* addr, uint64_t len, int advice) { return static_cast<int>(syscall(SYS_madvise, addr, len, advice)); }


// Moves `p`'s part of `copy` (which maps [base, ...)) onto p.lo with p's protection.
bool Place(uint8_t* copy, uint64_t base, const MapsPiece& p) {
  const uint64_t len = p.hi - p.lo;
  if (Mremap(copy + (p.lo - base), len, At(p.lo)) == MAP_FAILED) return false;
  return p.prot == (PROT_READ | PROT_WRITE) || Mprotect(At(p.lo), len, p.prot) == 0;
}

// Unmaps what is left of `copy` (size hi - lo, mapped at lo's offset 0) once `pieces` were
// moved out of it: only the gaps, since another thread may map something into a moved part.
void UnmapRest(uint8_t* copy, uint64_t lo, uint64_t hi, const MapsPiece* pieces, size_t n) {
  uint64_t at = lo;
  for (size_t i = 0; i <= n; ++i) {
    const uint64_t next = i < n ? pieces[i].lo : hi;
    if (next > at) Munmap(copy + (at - lo), next - at);
    if (i < n) at = pieces[i].hi;
  }
}

// Copy + remap, with every other thread parked. Null (and `*why`) if not done: nothing changed.
std::shared_ptr<Area> MoveIn(uint64_t lo, uint64_t hi, RangeBusyFn busy, void* ctx, const char** why) {
  const uint64_t n = hi - lo;
  auto area = std::make_shared<Area>();
  area->memfd = UniqueFd(static_cast<int>(syscall(SYS_memfd_create, kMemfdName, MFD_CLOEXEC)));
  struct stat st;
  if (!area->memfd.valid() || ftruncate(area->memfd.get(), static_cast<off_t>(n)) != 0 ||
      fstat(area->memfd.get(), &st) != 0) {
    *why = "no memfd";
    return nullptr;
  }
  void* shared = Mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, area->memfd.get(), 0);
  if (shared == MAP_FAILED) {
    *why = "no address space for the memfd";
    return nullptr;
  }
  WorldStop world;
  size_t pieces = 0;
  if (!world.StopOthers()) *why = "another thread did not stop";
  else if ((pieces = ScanMovablePrivate(lo, hi, g_pieces, why)) == 0) {}
  else if (busy(ctx, lo, hi)) *why = "another live registration of this process touches its pages";
  else if (!CopyAll(SYS_pwrite64, area->memfd.get(), At(lo), n, 0)) *why = "its pages could not be read";
  else if (Mremap(shared, n, At(lo)) == MAP_FAILED &&
           Mmap(At(lo), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, area->memfd.get(), 0) == MAP_FAILED) {
    // mremap may have unmapped the target before failing (ENOMEM: too many mappings); the file
    // holds the contents, so mapping it there is the way back. Neither worked: say so loudly.
    const int err = errno;
    world.Resume();
    Munmap(shared, n);
    SV_LOG(kError, "ibv_reg_mr([0x%llx, 0x%llx)): the pages could not be remapped (%s): the range may be lost",
           static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi), strerror(err));
    *why = "the remap failed";
    return nullptr;
  } else {
    shared = nullptr;
    for (size_t i = 0; i < pieces; ++i)
      if (g_pieces[i].prot != (PROT_READ | PROT_WRITE))
        Mprotect(At(g_pieces[i].lo), g_pieces[i].hi - g_pieces[i].lo, g_pieces[i].prot);
    // fork(): the child gets its private copy from the atfork handler, never these pages.
    Madvise(At(lo), n, MADV_DONTFORK);
  }
  world.Resume();
  if (shared != nullptr) {
    Munmap(shared, n);
    return nullptr;
  }
  area->lo = lo;
  area->hi = hi;
  area->dev = EncodeDev(st.st_dev);
  area->ino = st.st_ino;
  area->pid = getpid();
  area->busy = busy;
  area->ctx = ctx;
  return area;
}

// Back into private anonymous memory, with every other thread parked; false if it must wait
// (a live key still touches the pages, or a thread did not stop). Call with no registration left.
bool MoveBack(Area& a) {
  if (a.pid != getpid()) return true;
  const uint64_t n = a.hi - a.lo;
  auto* copy = static_cast<uint8_t*>(Mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (copy == MAP_FAILED) return false;
  WorldStop world;
  size_t placed = 0;  // the pieces of g_pieces moved out of `copy` so far
  bool done = false;
  if (world.StopOthers() && !a.busy(a.ctx, a.lo, a.hi)) {
    const size_t pieces = ScanFileBacked(a.lo, a.hi, a.dev, a.ino, 0, g_pieces);  // SIZE_MAX: later
    done = pieces != SIZE_MAX;
    for (; done && placed < pieces; ++placed) {
      const MapsPiece& p = g_pieces[placed];
      done = CopyAll(SYS_pread64, a.memfd.get(), copy + (p.lo - a.lo), p.hi - p.lo, p.lo - a.lo) &&
             Place(copy, a.lo, p);
      if (!done) break;
    }
  }
  world.Resume();
  UnmapRest(copy, a.lo, a.hi, g_pieces, placed);
  // Peers may keep a mapping of the memfd in their caches: its pages are freed now -- unless
  // the application still maps part of it elsewhere (it mremap-ed registered pages away).
  if (done && !FileMapped(a.dev, a.ino) && ftruncate(a.memfd.get(), 0) != 0) {}
  return done;
}

// Moves back the moves whose registrations are all gone; under g_mu.
void RetryLingering() {
  std::erase_if(g_areas, [](const std::shared_ptr<Area>& a) {
    if (!a->file.expired()) return false;
    if (!MoveBack(*a)) return false;
    ++g_counters.moved_back;
    return true;
  });
}

// A move's last registration is gone: move it (and any other lingering one) back.
void Release() {
  std::lock_guard lock(g_mu);
  RetryLingering();
}

void ForkPrepare() {
  g_mu.lock();
  // The copy is one instant of the pages: no other thread writes them meanwhile (if they do not
  // park, it is taken anyway, as a fork races with writers). No allocation below.
  WorldStop world;
  world.StopOthers();
  for (auto& a : g_areas) {
    a->snapshot = nullptr;
    if (a->pid != getpid()) continue;
    const size_t n = ScanFileBacked(a->lo, a->hi, a->dev, a->ino, 0, a->snapshot_pieces);
    if (n == SIZE_MAX || n == 0) continue;
    void* copy = Mmap(nullptr, a->hi - a->lo, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) continue;
    a->snapshot = static_cast<uint8_t*>(copy);
    a->snapshot_count = n;
    for (size_t i = 0; i < n; ++i) {
      const MapsPiece& p = a->snapshot_pieces[i];
      CopyAll(SYS_pread64, a->memfd.get(), a->snapshot + (p.lo - a->lo), p.hi - p.lo, p.lo - a->lo);
    }
  }
}

void ForkParent() {
  for (auto& a : g_areas)
    if (a->snapshot != nullptr) Munmap(std::exchange(a->snapshot, nullptr), a->hi - a->lo);
  g_mu.unlock();
}

void ForkChild() {
  // The only thread: the copies go where the parent's shared pages were (MADV_DONTFORK left
  // the range empty), with the protections they had.
  for (auto& a : g_areas) {
    if (a->snapshot == nullptr) continue;
    size_t placed = 0;
    while (placed < a->snapshot_count && Place(a->snapshot, a->lo, a->snapshot_pieces[placed])) ++placed;
    UnmapRest(a->snapshot, a->lo, a->hi, a->snapshot_pieces, placed);
    a->snapshot = nullptr;
  }
  g_areas.clear();  // the child's memory is private: nothing of it is moved
  g_mu.unlock();
}

}  // namespace

bool PrivateShareEnabled() {
  static const bool enabled = [] {
    const char* v = getenv("SOFTVERBS_PRIVATE_SHARE");
    return v == nullptr || strcmp(v, "0") != 0;
  }();
  return enabled;
}

std::optional<SharedBacking> SharePrivate(uint64_t addr, uint64_t length, RangeBusyFn busy, void* ctx) {
  if (!PrivateShareEnabled() || length == 0) return std::nullopt;
  const uint64_t page = PageSize();
  const uint64_t lo = addr & ~(page - 1), hi = (addr + length + page - 1) & ~(page - 1);
  ProcessToken::Self();  // cached now: `busy` may use it while the threads are parked
  std::shared_ptr<const BackingFile> found;  // released after the lock (its release takes it)
  const char* why = nullptr;
  std::lock_guard lock(g_mu);
  RetryLingering();
  for (const auto& a : g_areas) {
    if (a->hi <= lo || hi <= a->lo) continue;
    found = a->file.lock();
    // Inside a live move whose pages are still where it put them: share its memfd.
    if (found != nullptr && a->lo <= lo && hi <= a->hi &&
        ScanFileBacked(lo, hi, a->dev, a->ino, lo - a->lo, g_pieces) == 1 && g_pieces[0].lo == lo &&
        g_pieces[0].hi == hi) {
      ++g_counters.reused;
      return SharedBacking{found, addr - a->lo};
    }
    why = "it overlaps pages moved for another registration";
    break;
  }
  if (why == nullptr && !LooksPrivateAnonymous(addr)) return std::nullopt;  // a file's: not ours to move
  std::shared_ptr<Area> area = why == nullptr ? MoveIn(lo, hi, busy, ctx, &why) : nullptr;
  if (area == nullptr) {
    ++g_counters.refused;
    SV_LOG(kDebug, "ibv_reg_mr([0x%llx, +%llu)): private memory not moved into a shared file: %s",
           static_cast<unsigned long long>(addr), static_cast<unsigned long long>(length), why);
    return std::nullopt;
  }
  UniqueFd dup(fcntl(area->memfd.get(), F_DUPFD_CLOEXEC, 0));
  const int32_t handle = dup.get();
  auto* file = new BackingFile(BackingKind::kFile, std::move(dup), handle, NextBackingTag(), area->dev, area->ino);
  // The deleter holds no reference to the area (which holds a weak one to this control block:
  // a cycle would keep both, and the memfd, forever); g_areas keeps it until it moves back.
  std::shared_ptr<const BackingFile> shared(file, [](const BackingFile* f) {
    delete f;
    Release();
  });
  area->file = shared;
  g_areas.push_back(area);
  static std::once_flag atfork;
  std::call_once(atfork, [] { pthread_atfork(ForkPrepare, ForkParent, ForkChild); });
  ++g_counters.moved;
  SV_LOG(kDebug, "ibv_reg_mr([0x%llx, +%llu)): pages [0x%llx, 0x%llx) moved into a memfd: peers map it",
         static_cast<unsigned long long>(addr), static_cast<unsigned long long>(length),
         static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi));
  return SharedBacking{std::move(shared), addr - lo};
}

PrivateShareCounters PrivateShareStats() {
  std::lock_guard lock(g_mu);
  PrivateShareCounters c = g_counters;
  for (const auto& a : g_areas) c.lingering += a->file.expired() ? 1 : 0;
  return c;
}

}  // namespace softverbs::fabric
